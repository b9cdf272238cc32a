//! What compiling a kernel produces ([`Compiled`]), the choices that shape
//! it ([`CompileOptions`]), and the back end every schedule ends with
//! (`finish`: wgmma waits, barriers, warpgroup branches joined, the shared-memory limit, PTX).
//!
//! Expects a lowered Thread IR function and the layouts it was lowered
//! with. Guarantees a [`Compiled`] whose PTX is the function's, or an error
//! naming the limit it exceeds. Depends on the passes only, so that every
//! schedule ([`crate::schedule`]) and the driver ([`mod@crate::compile`]) can
//! use it without depending on each other.

use crate::ir::{Kernel, SpanId};
use crate::passes::layout_infer::LayoutPlan;
use crate::passes::{arrivals, barriers, cp_async_wait, merge_branches, pack_cvt, split_warpgroups, trace, wgmma_wait};
use crate::{thread_ir, CompileError, Target};

/// The result of compiling one kernel for one target.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The target the PTX is for.
    pub target: Target,
    /// PTX text for the whole module (one `.entry`).
    pub ptx: String,
    /// Dynamic shared memory the kernel needs at launch, in bytes.
    pub shared_bytes: u32,
    /// The Thread IR in its text form (for `TILE_DUMP`).
    pub thread_ir: String,
    /// The layout chosen for each fragment, and for each shared buffer whose
    /// layout is not row-major (prefixed `shared`), by name (for dumps and tests).
    pub layouts: Vec<(String, String)>,
    /// The Thread IR itself (for later passes, simulators and tests).
    pub function: thread_ir::Function,
    /// Threads per block at launch: `kernel.threads`, plus the producer
    /// warpgroup when the kernel was warp-specialized.
    pub threads: u32,
    /// The TMA tensor maps the kernel takes after its other parameters
    /// (empty for kernels without TMA); see [`crate::abi::TensorMapUse`].
    pub tensor_maps: Vec<crate::abi::TensorMapUse>,
    /// A persistent kernel: each block runs the grid's blocks
    /// `ctaid.x, ctaid.x + nctaid.x, ...` itself, so the launch may use any
    /// number of blocks from 1 to the grid's total, as a 1-D grid (the
    /// runtime uses as many as the SMs hold at once). Launched with the whole grid, it is the
    /// ordinary kernel.
    pub persistent: bool,
    /// The schedule that made this variant ([`crate::schedule::Schedule::name`]):
    /// `"warp_specialized_gemm"`, `"warp_specialized_loop_persistent"`,
    /// `"warp_specialized_loop"`, `"tma_copy"`,
    /// `"cp_async_pipeline"` or `"general"`.
    pub schedule: &'static str,
}

/// Choices that change the generated code, not its meaning.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// Stage fragment → global copies that would store fewer than 16 bytes
    /// per access through shared memory, for 16-byte stores
    /// ([`crate::passes::epilogue`]). Dropped by itself when the kernel
    /// would then exceed the target's shared memory.
    pub stage_epilogues: bool,
    /// In a warp-specialized variant, store the accumulator copied out right
    /// after the main loop with TMA (through shared panels) instead of the
    /// threads' own (staged) stores.
    pub tma_store: bool,
    /// Make a warp-specialized GEMM variant with a TMA store persistent when
    /// it can be (see [`Compiled::persistent`]).
    pub persistent: bool,
    /// Add the warp-specialized loop's persistent variant
    /// (`warp_specialized_loop_persistent`, before the plain one) where that
    /// schedule applies. On by default. Its blocks take their tiles from a
    /// dynamic scheduler (a global counter the runtime zeroes per launch,
    /// `abi::TILE_COUNTER_PARAM`; `TILE_PERSISTENT_STATIC=1` gives the
    /// static stride `ctaid.x + i·nctaid.x`). Measured on the H200 with the
    /// static stride (main 331d5ae, TFLOPS, persistent vs plain): attention
    /// f16 b32 h16 s512 d128 451.6 vs 399.6, b8 h16 s2048 d128 567.7 vs
    /// 542.2, bf16 b2 h16 s8192 d128 589.7 vs 569.3, MLA f16 b64 h128
    /// ctx8192 442.0 vs 406.5, b128 h128 s_q2 444.8 vs 396.0, h16 3704 vs
    /// 3425 GB/s (short or few tiles: +5–13 %); behind where tiles are
    /// uneven (causal b4 h32 s4096 d128 490.4 vs 521.5, d256 492.3 vs 520.2,
    /// MLA bf16 b128 h128 s_q1 319.0 vs 334.0: the static stride does not
    /// balance, which the dynamic scheduler is for) and at long uniform
    /// d128/d256 (562.5 vs 580.5, 591.9 vs 625.5). Expected with the
    /// dynamic scheduler: the causal and ragged MLA cases at least level
    /// with the plain grid (heaviest tiles first, each to the block that
    /// frees up). `TILE_SKIP_SCHEDULES=warp_specialized_loop_persistent`
    /// launches the plain variant.
    pub wsloop_persistent: bool,
    /// On sm_90a, issue the pipelined copies that TMA can do as TMA boxes
    /// completing on per-stage mbarriers (`schedule/tma_copy.rs`). The
    /// result then takes tensor maps: [`crate::compile_variants`] makes it a
    /// variant of its own, before the general one (off by default).
    pub tma_copies: bool,
    /// In a warp-specialized loop with two consumer warpgroups, let them
    /// take turns at the tensor cores (named barriers: one's softmax runs
    /// under the other's gemms) where the loop allows it
    /// (`schedule/warp_specialized_loop/lower.rs`). On by default; off for
    /// bisecting.
    pub ping_pong: bool,
    /// In a warp-specialized loop that does not ping-pong, issue the loop's
    /// first gemm (attention's Q·Kᵀ) one iteration ahead, into a second set
    /// of accumulator registers, so that it runs under the rest of the
    /// iteration (the softmax); where the loop allows it
    /// (`schedule/warp_specialized_loop/lower.rs`). On by default; off for
    /// bisecting.
    pub lookahead: bool,
    /// Let the warp-specialized loop take a kernel of one consumer
    /// warpgroup (`threads = 128`) whose loop has a gemm. Off by default:
    /// there the TMA-copy variant's 2-4 blocks per SM overlap softmax and
    /// wgmma better (measured on the H200, BENCHMARKS.md), so the plan
    /// declines it (`schedule/warp_specialized_loop/plan.rs`); on for the
    /// tests that keep that variant (issuing ahead, two blocks per SM)
    /// correct.
    pub wsloop_one_warpgroup: bool,
    /// In a warp-specialized loop whose two consumer warpgroups ping-pong,
    /// issue the first gemm one iteration ahead too (FA3's schedule: each
    /// warpgroup's turn at the tensor cores issues the next Q·Kᵀ, its
    /// softmax then runs under that gemm and under the other warpgroup's),
    /// where the second set of scores fits in registers
    /// (`schedule/warp_specialized_loop/lower.rs`);
    /// [`CompileOptions::lookahead`] must be on as well. On by default (the
    /// simulator's proof: `tile-ir/tests/hopper_wsloop_sim.rs`); to be kept
    /// only if the H200 measures it faster than the plain ping-pong.
    pub ping_pong_lookahead: bool,
    /// In a warp-specialized loop whose body starts with a gemm on one
    /// ring and ends with a gemm on another (attention's Q·Kᵀ … P·V),
    /// issue the last gemm one iteration late, right after the next
    /// iteration's first, so that the softmax runs under it (FA3's
    /// intra-warpgroup overlap: one set of scores, P kept across the
    /// back-edge; `schedule/warp_specialized_loop/defer.rs`), where the last
    /// gemm is the wider (measured faster there: d256; slower at d128 with
    /// key blocks of 128). Preferred to [`CompileOptions::lookahead`] where
    /// both apply. On by default; off for bisecting.
    pub defer_last_gemm: bool,
    /// Where the last gemm is deferred ([`CompileOptions::defer_last_gemm`])
    /// and the body's first statement touching its accumulator only scales
    /// it (attention's `acc *= alpha`, a parallel nest of stores into the
    /// accumulator reading row factors nothing later in the body writes),
    /// run that nest in the next iteration, right after the first gemm's
    /// issue and before the deferred gemm's (FA3's order: the rescale of O
    /// under Q·Kᵀ, off the path from the softmax to the next issue;
    /// `schedule/warp_specialized_loop/defer.rs`). On by default; off for
    /// bisecting.
    pub hoist_rescale: bool,
    /// In the cp.async pipeline (and the TMA copies built on it), wait for
    /// each pipelined copy just before its first reader, one cp.async group
    /// (and TMA barrier) per wait batch, so that one copy's wait never
    /// drains another's prefetch (`schedule/cp_async_pipeline/pipelined_loop.rs`,
    /// [`crate::passes::pipeline::PipelinePlan::wait_batches`]). On by
    /// default; off (every copy of an iteration in one group, waited for at
    /// the top of the body) for bisecting.
    pub per_copy_waits: bool,
    /// In a warp-specialized loop, give each TMA box of a ring whose first
    /// reader is a wgmma gemm taking the stage as its K-major B its own
    /// full barrier, waited for right before the k16 slices that read that
    /// box, so the gemm starts when its first box lands (FlashMLA's 64×64
    /// pieces: MLA's Q·Kᵀ over 8 boxes of `kv_s`), where the loop neither
    /// issues ahead, defers, nor ping-pongs
    /// (`schedule/warp_specialized_loop/pieces.rs`). On by default; off
    /// (one barrier per stage) for bisecting.
    pub piece_barriers: bool,
    /// In a warp-specialized loop that neither issues ahead nor defers a
    /// gemm, whose body starts with a gemm (or a chain of them into one
    /// fragment) and ends with another gemm (attention's Q·Kᵀ … P·V), and
    /// whose two warpgroups ping-pong, leave
    /// the last gemm in flight across the back-edge: its
    /// `wgmma.wait_group` and the release of the rings it is the last
    /// user of come right after the next iteration's first gemm is issued,
    /// so the two run back to back on the tensor cores, both under the
    /// other warpgroup's softmax, and no registers are
    /// added (`schedule/warp_specialized_loop/lower.rs`, "The last gemm's
    /// wait"). On by default; off for bisecting.
    pub late_last_wait: bool,
    /// Pair f32 → f16/bf16 conversions into one `cvt.rn.{f16,bf16}x2.f32`
    /// (an F2FP on the ALU instead of two F2Fs on the XU pipe that `ex2`
    /// shares, and no PRMT to pack the halves; `passes/pack_cvt.rs`). On
    /// by default; off for bisecting.
    pub pack_conversions: bool,
    /// Move a straight-line `cp.async.wait_group 0` (a synchronous copy
    /// into shared memory before a pipelined loop: attention's Q tile in
    /// the TMA-copy variant) past the independent work after it, so that
    /// the loop prologue's loads are issued before it waits
    /// (`passes/cp_async_wait.rs`). On by default; off for bisecting.
    pub defer_cp_async_waits: bool,
    /// Divide `i32`/`u32` values without `div.s32`/`rem.s32` (which ptxas
    /// keeps as a reciprocal sequence on the XU pipe, even by an
    /// immediate; `passes/lower/divide.rs`): by a constant with shifts or a
    /// multiply-high by its magic number, by one of the launch's divisors
    /// (`abi::dims_divisors`: GQA's `H / HKV`, the grid extents a
    /// persistent variant unfolds its tiles by) with the magic number the
    /// launch passes. The parameters are passed either way. On by default;
    /// off for bisecting.
    pub fast_divisors: bool,
    /// In a warp-specialized loop of a kernel with `cluster = (C, 1, 1)`,
    /// load each pipelined tile the cluster's blocks share once per
    /// cluster: each block's producer a `1/C` share of every box,
    /// multicast to all of them (`schedule/warp_specialized_loop/plan.rs`,
    /// `multicast_copies`). On by default; off (each block loads its own
    /// tiles, the cluster only a launch shape) for bisecting and A/B runs.
    pub wsloop_multicast: bool,
    /// In a warp-specialized consumers' loop, a gemm on wgmma that every
    /// consumer runs (no `policy(Warpgroup(w))`), not the body's last,
    /// leaves its `wgmma.wait_group 0` (and the release of the rings it is
    /// the last reader of) for just before the first later statement that
    /// touches its accumulator's registers, writes its operands, or is a
    /// gemm: MLA's seesaw runs warpgroup 1's softmax of block 1 under
    /// block 0's P·V. On by default; off for bisecting and A/B runs.
    pub wsloop_deferred_waits: bool,
    /// The warp-specialized loop's consumers' loop, where its body has
    /// statements of one warpgroup (`policy(Warpgroup(w))`), runs as one
    /// copy per consumer warpgroup, each with the other's branches
    /// dropped ([`crate::passes::split_warpgroups`]): ptxas sees each
    /// warpgroup's path alone.
    pub wsloop_split_warpgroups: bool,
    /// In a warp-specialized consumers' loop split per warpgroup
    /// (`wsloop_split_warpgroups`), a gemm of one warpgroup waits in its
    /// branch and may leave its wait for later as a gemm of every consumer
    /// does (`wsloop_deferred_waits`), released rings' other pending
    /// readers retired first: each warpgroup issues its own P·V (MLA's
    /// crossed and staggered seesaws, session 31), and an explicit
    /// `barrier()` right after one warpgroup's gemm lets the other start
    /// its own before that gemm completes (MLA's seesaw: block 1's scores
    /// issued right behind block 0's, +1.0 to +2.9 % at s_q 2 on the H100,
    /// BENCHMARKS.md session 37). On by default; off for A/B runs. Not
    /// with `wsloop_rotate_scores` or `wsloop_piece_releases`, which were
    /// built and checked without it (together, the simulator finds a
    /// shared-memory race: session 37).
    pub wsloop_owner_waits: bool,
    /// With `wsloop_owner_waits`, the consumers that do not run a ring's
    /// first reader (a gemm of one warpgroup) wait for its stage only
    /// before their own first statement touching it, not with that
    /// reader. Off by default (measured: the plain MLA kernel 1.4 % slower
    /// on the H100, the crossed seesaw slower with it); on for experiments.
    pub wsloop_lazy_waits: bool,
    /// A debugging build: each warpgroup's thread 0 of the first blocks
    /// records a `%clock64` stamp after every synchronizing instruction
    /// into a buffer parameter the runtime passes and writes out
    /// (`passes::trace`; `TILE_TRACE` names the file). Off by default.
    pub trace: bool,
    /// The other consumers of a pieced stage that a gemm of one warpgroup
    /// reads first (MLA's scores) skip their waits for its pieces where
    /// they run work of their own before their first touch of it and a
    /// barrier of all consumers orders that touch after the owner's waits
    /// (`warp_specialized_loop/observers.rs`): MLA's seesaw, whose
    /// warpgroup 0 otherwise waits for block 1's pieces before its
    /// softmax. On by default; off for A/B runs.
    pub wsloop_ordered_observers: bool,
    /// In a warp-specialized consumers' loop, a pending gemm (its wait
    /// deferred, `wsloop_deferred_waits`) whose accumulator a later nest
    /// rescales only under a row condition (`if alpha[i] != 1.0 { .. }`)
    /// is waited for only where a thread of the warpgroup takes that
    /// condition (a warpgroup vote, `bar.red.or`); and a later gemm of the
    /// same instructions into the same accumulator is issued behind it
    /// before its wait (wgmmas into one accumulator run in order), which
    /// then keeps only the later one in flight (`wgmma.wait_group 1`)
    /// before releasing the earlier one's rings: MLA's seesaw issues block
    /// 1's P·V right behind block 0's when the rows' reference maximum has
    /// not moved. Off by default until timed on the GPU (correct on the
    /// simulator and through ptxas, BENCHMARKS.md session 32); on for
    /// experiments (`TILE_OPTIONS_ON`).
    pub wsloop_guarded_waits: bool,
    /// In a warp-specialized consumers' loop split per warpgroup, a body
    /// that opens with one warpgroup's chain of gemms into a fragment of
    /// its own issues the next iteration's chain at the end of the
    /// current one, behind its last gemm
    /// (`schedule/warp_specialized_loop/rotate.rs`): MLA's seesaw queues
    /// block 0's next scores behind block 1's P·V, so that the tensor
    /// cores do not drain at the loop's turn. Off: timed on the GPU
    /// (BENCHMARKS.md, session 35), it loses 9–10 % on the seesaw (whose
    /// one-stage rings make the early chain wait for block 0's refill
    /// before block 1's ring is released; 5 % with `wsloop_piece_releases`,
    /// which cuts the chain around that release) and moves the plain
    /// kernel by −0.4 to +1.5 %; on for experiments (`TILE_OPTIONS_ON`).
    pub wsloop_rotate_scores: bool,
    /// In a warp-specialized consumers' loop of two consumer warpgroups, a
    /// ring with per-piece barriers (`piece_barriers`) gets an empty
    /// barrier per box too, and each warpgroup releases a box after its
    /// last statement touching it (a gemm whose warpgroups split N reads
    /// only its own columns' boxes) instead of the whole stage after the
    /// ring's last reader (`schedule/warp_specialized_loop/pieces.rs`);
    /// the producer refills box by box. MLA's seesaw: warpgroup 0 frees
    /// the left half of block 0's V as soon as its half of P·V is done.
    /// Off: timed on the GPU (BENCHMARKS.md, session 35), alone it moves
    /// the seesaw by −0.5 to +0.3 % (−0.8 to −1.9 % with `wsloop_owner_waits`
    /// and the barrier behind S₀, session 37); with `wsloop_rotate_scores` it cuts
    /// the rotated chain around block 1's release (FlashMLA's order:
    /// `rotate.rs`); on for experiments.
    pub wsloop_piece_releases: bool,
    /// The warp-specialized loop's producer, after issuing iteration `k`'s
    /// boxes of a ring, prefetches iteration `k + 1`'s into L2
    /// (`cp.async.bulk.prefetch.tensor`, the same boxes and cache policy;
    /// its origin, a page index read from a table included, evaluated at
    /// `k + 1` while `k + 1` is in the loop's range), so that the refill
    /// of a one-stage ring (MLA's seesaw) reads L2 rather than DRAM. Off:
    /// timed on the H100 (BENCHMARKS.md, session 37) it loses 17–20 % on
    /// both MLA kernels, and its trace shows a refill's first box landing
    /// as late as without it (that latency is the L2-to-SM path, not
    /// DRAM); on for experiments.
    pub wsloop_l2_prefetch: bool,
    /// In a warp-specialized consumers' loop split per warpgroup, a
    /// barrier of both consumer warpgroups where one of them needs nothing
    /// from the other becomes that one's `barrier.arrive` and the other's
    /// `barrier.sync` ([`crate::passes::arrivals`]): MLA's seesaw hands P₀
    /// over from warpgroup 0, which issues its half of P·V₀ without waiting
    /// for warpgroup 1's maximum, and P₁ from warpgroup 1 (FlashMLA's
    /// order). Off: timed on the H100 (BENCHMARKS.md, session 38) it moves
    /// the seesaw by +0.1 to +0.6 % and the plain kernel by −2.8 % (b128,
    /// s_q 1) to +0.4 % (b64): warpgroup 1's softmax of block 1 between
    /// its two P·V halves is what the tensor cores wait for there; on for
    /// experiments.
    pub wsloop_arrivals: bool,
    /// Shared-memory dependences whose both accesses are one warpgroup's
    /// (in its branches) are ordered by a barrier of that warpgroup's 128
    /// threads, not of every thread ([`crate::passes::barriers`]). On by
    /// default; off for bisecting and A/B runs.
    pub warpgroup_barriers: bool,
    /// The warp-specialized consumers' loop orders an iteration's accesses
    /// of its rings' stages after earlier iterations' through the rings'
    /// mbarriers, with no barrier ([`crate::thread_ir::Function::ring_loops`]).
    /// On by default; off for bisecting and A/B runs.
    pub ring_turns: bool,
    /// A barrier of every thread needed only after a uniform `if` that
    /// wrote what it orders goes at the end of that `if`'s branch
    /// ([`crate::passes::barriers`]): MLA's zeroing of the keys past the
    /// sequence. On by default; off for bisecting and A/B runs.
    pub sunk_barriers: bool,
}

/// The option a switch of [`CompileOptions::SWITCHES`] turns off.
pub type Switch = fn(&mut CompileOptions) -> &mut bool;

impl CompileOptions {
    /// The switches a build can turn off (`TILE_OPTIONS_OFF`), by name:
    /// the transformations on by default, each with its option.
    pub const SWITCHES: [(&'static str, Switch); 23] = [
        ("stage_epilogues", |o| &mut o.stage_epilogues),
        ("tma_store", |o| &mut o.tma_store),
        ("persistent", |o| &mut o.persistent),
        ("wsloop_persistent", |o| &mut o.wsloop_persistent),
        ("ping_pong", |o| &mut o.ping_pong),
        ("lookahead", |o| &mut o.lookahead),
        ("ping_pong_lookahead", |o| &mut o.ping_pong_lookahead),
        ("defer_last_gemm", |o| &mut o.defer_last_gemm),
        ("hoist_rescale", |o| &mut o.hoist_rescale),
        ("per_copy_waits", |o| &mut o.per_copy_waits),
        ("piece_barriers", |o| &mut o.piece_barriers),
        ("late_last_wait", |o| &mut o.late_last_wait),
        ("pack_conversions", |o| &mut o.pack_conversions),
        ("defer_cp_async_waits", |o| &mut o.defer_cp_async_waits),
        ("fast_divisors", |o| &mut o.fast_divisors),
        ("wsloop_multicast", |o| &mut o.wsloop_multicast),
        ("wsloop_deferred_waits", |o| &mut o.wsloop_deferred_waits),
        ("wsloop_split_warpgroups", |o| &mut o.wsloop_split_warpgroups),
        ("wsloop_owner_waits", |o| &mut o.wsloop_owner_waits),
        ("wsloop_ordered_observers", |o| &mut o.wsloop_ordered_observers),
        ("warpgroup_barriers", |o| &mut o.warpgroup_barriers),
        ("ring_turns", |o| &mut o.ring_turns),
        ("sunk_barriers", |o| &mut o.sunk_barriers),
    ];

    /// The experiments a build can turn on (`TILE_OPTIONS_ON`), by name:
    /// the transformations off by default, each with its option.
    pub const EXPERIMENTS: [(&'static str, Switch); 9] = [
        ("tma_copies", |o| &mut o.tma_copies),
        ("wsloop_one_warpgroup", |o| &mut o.wsloop_one_warpgroup),
        ("wsloop_lazy_waits", |o| &mut o.wsloop_lazy_waits),
        ("wsloop_guarded_waits", |o| &mut o.wsloop_guarded_waits),
        ("wsloop_rotate_scores", |o| &mut o.wsloop_rotate_scores),
        ("wsloop_piece_releases", |o| &mut o.wsloop_piece_releases),
        ("wsloop_l2_prefetch", |o| &mut o.wsloop_l2_prefetch),
        ("wsloop_arrivals", |o| &mut o.wsloop_arrivals),
        ("trace", |o| &mut o.trace),
    ];

    /// These options with the switches named in `spec` (comma-separated,
    /// from [`CompileOptions::SWITCHES`]) off: `TILE_OPTIONS_OFF`, to
    /// bisect a wrong answer or compare a transformation's speed with the
    /// same source. Errors name the first unknown switch.
    pub fn with_off(self, spec: &str) -> Result<CompileOptions, String> {
        self.with(spec, false)
    }

    /// These options with the experiments named in `spec` (comma-separated,
    /// from [`CompileOptions::EXPERIMENTS`]) on: `TILE_OPTIONS_ON`, to time
    /// a transformation not yet on by default against the default build.
    /// Errors name the first unknown experiment.
    pub fn with_on(self, spec: &str) -> Result<CompileOptions, String> {
        self.with(spec, true)
    }

    fn with(mut self, spec: &str, on: bool) -> Result<CompileOptions, String> {
        let (table, var, what) = if on {
            (&Self::EXPERIMENTS[..], "TILE_OPTIONS_ON", "experiment")
        } else {
            (&Self::SWITCHES[..], "TILE_OPTIONS_OFF", "switch")
        };
        for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some((_, field)) = table.iter().find(|(n, _)| *n == name) else {
                let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
                let plural = if on { "experiments" } else { "switches" };
                return Err(format!("{var} names an unknown {what} `{name}`; the {plural} are {}", names.join(", ")));
            };
            *field(&mut self) = on;
        }
        Ok(self)
    }
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            stage_epilogues: true,
            tma_store: true,
            persistent: true,
            wsloop_persistent: true,
            tma_copies: false,
            ping_pong: true,
            lookahead: true,
            wsloop_one_warpgroup: false,
            ping_pong_lookahead: true,
            defer_last_gemm: true,
            hoist_rescale: true,
            per_copy_waits: true,
            piece_barriers: true,
            late_last_wait: true,
            pack_conversions: true,
            defer_cp_async_waits: true,
            fast_divisors: true,
            wsloop_multicast: true,
            wsloop_deferred_waits: true,
            wsloop_split_warpgroups: true,
            wsloop_owner_waits: true,
            wsloop_lazy_waits: false,
            trace: false,
            wsloop_ordered_observers: true,
            wsloop_guarded_waits: false,
            wsloop_rotate_scores: false,
            wsloop_piece_releases: false,
            wsloop_l2_prefetch: false,
            wsloop_arrivals: false,
            warpgroup_barriers: true,
            ring_turns: true,
            sunk_barriers: true,
        }
    }
}

/// Barriers, the shared-memory limit and PTX emission.
pub(crate) fn finish(
    kernel: &Kernel,
    target: Target,
    plan: &LayoutPlan,
    mut func: thread_ir::Function,
    schedule: &'static str,
    options: &CompileOptions,
) -> Result<Compiled, Vec<CompileError>> {
    if options.pack_conversions {
        let mut body = std::mem::take(&mut func.body);
        pack_cvt::pack_conversions(&mut body, &mut |class| func.new_reg(class));
        func.body = body;
    }
    wgmma_wait::defer_wgmma_waits(&mut func.body);
    if options.defer_cp_async_waits {
        cp_async_wait::defer_cp_async_waits(&mut func.body);
    }
    let warpgroups = if options.warpgroup_barriers { func.warpgroup_preds.clone() } else { Vec::new() };
    let rings = if options.ring_turns { func.ring_loops.clone() } else { Vec::new() };
    barriers::insert_barriers(&mut func.body, &barriers::Options { warpgroups, rings, sink: options.sunk_barriers });
    merge_branches::merge_warpgroup_branches(&mut func);
    split_warpgroups::split_warpgroup_loops(&mut func);
    if options.wsloop_arrivals {
        arrivals::arrive_where_possible(&mut func);
    }
    if options.trace {
        trace::instrument(&mut func);
    }
    let limit = target.info().shared_limit;
    if func.shared_bytes > limit {
        return Err(vec![CompileError::new(
            SpanId::NONE,
            format!(
                "kernel `{}` needs {} bytes of shared memory, more than the {} bytes a block can have on {}",
                kernel.name,
                func.shared_bytes,
                limit,
                target.name()
            ),
        )]);
    }
    // `blocks_per_sm = N`: N blocks' shared memory (each with the 1 KiB
    // the SM reserves per block) on one SM, and the launch bound where the
    // schedule set none (the warp-specialized ones set their own).
    let blocks = kernel.blocks_per_sm;
    if blocks > 1 {
        let per_sm = limit as u64 + 1024;
        let need = blocks as u64 * (func.shared_bytes as u64 + 1024);
        if need > per_sm {
            return Err(vec![CompileError::new(
                SpanId::NONE,
                format!(
                    "kernel `{}`: `blocks_per_sm = {blocks}` needs {blocks} × ({} + 1024) bytes of shared memory on one SM, more than the {per_sm} bytes an SM has on {}; use fewer stages, a smaller tile or fewer blocks",
                    kernel.name,
                    func.shared_bytes,
                    target.name()
                ),
            )]);
        }
        if func.min_blocks_per_sm.is_none() {
            func.min_blocks_per_sm = Some(blocks);
        }
    }
    let ptx = crate::ptx::try_emit(&func, target).map_err(|e| vec![e])?;
    let mut layouts: Vec<(String, String)> =
        plan.frags.iter().map(|(b, l)| (kernel.buffer(*b).name.clone(), l.describe())).collect();
    layouts
        .extend(plan.shared.iter().map(|(b, l)| (kernel.buffer(*b).name.clone(), format!("shared {}", l.describe()))));
    layouts.sort();
    let thread_ir = thread_ir::print_function(&func);
    let threads = func.threads;
    let tensor_maps = func.tensor_maps.clone();
    let persistent = func.persistent;
    Ok(Compiled {
        target,
        ptx,
        shared_bytes: func.shared_bytes,
        thread_ir,
        layouts,
        function: func,
        threads,
        tensor_maps,
        persistent,
        schedule,
    })
}

#[cfg(test)]
mod tests {
    use super::CompileOptions;

    #[test]
    fn switches_turn_off_by_name() {
        let d = CompileOptions::default();
        assert_eq!(d.with_off("").unwrap(), d);
        let o = d.with_off(" late_last_wait, ping_pong ,").unwrap();
        assert!(!o.late_last_wait && !o.ping_pong);
        assert_eq!(CompileOptions { late_last_wait: true, ping_pong: true, ..o }, d);
        // Every switch names an option that is on by default and turns it off.
        for (name, _) in CompileOptions::SWITCHES {
            let o = d.with_off(name).unwrap();
            assert_ne!(o, d, "{name}");
            assert_eq!(o.with_off(name).unwrap(), o, "{name}");
        }
        let e = d.with_off("ping_pong,pingpong").unwrap_err();
        assert!(e.contains("`pingpong`") && e.contains("late_last_wait"), "{e}");
    }

    #[test]
    fn experiments_turn_on_by_name() {
        let d = CompileOptions::default();
        assert_eq!(d.with_on("").unwrap(), d);
        // Every experiment names an option that is off by default and turns it on.
        for (name, _) in CompileOptions::EXPERIMENTS {
            let o = d.with_on(name).unwrap();
            assert_ne!(o, d, "{name}");
            assert_eq!(o.with_on(name).unwrap(), o, "{name}");
            assert!(CompileOptions::SWITCHES.iter().all(|(n, _)| *n != name), "{name} is both");
        }
        let o = d.with_on("wsloop_guarded_waits").unwrap();
        assert!(o.wsloop_guarded_waits && !d.wsloop_guarded_waits);
        let e = d.with_on("ping_pong").unwrap_err();
        assert!(
            e.contains("TILE_OPTIONS_ON") && e.contains("`ping_pong`") && e.contains("wsloop_guarded_waits"),
            "{e}"
        );
    }
}

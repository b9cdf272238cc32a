//! The passes, in the order a schedule ([`crate::schedule`]) runs them
//! (the driver [`mod@crate::compile`] picks the schedules; each one's `compile`
//! calls these):
//!
//! 1. `verify` ([`crate::verify`], by the driver): the Tile IR invariants
//!    (types, shapes, scopes, extents).
//! 2. [`layout_infer`]: a layout for every fragment and parallel nest
//!    (gemm accumulators get the mma.sync layout, or on sm_90a the wgmma
//!    one for the gemms [`crate::hopper::wgmma_gemm`] accepts, or the
//!    warp-specialized one for the accumulators a schedule names; gemm
//!    shared operands a swizzled shared layout, in 64-column panels when
//!    wgmma reads rows wider than 128 bytes; otherwise blocked
//!    distributions; reductions derive replicated layouts; conflicts are
//!    errors naming both uses).
//! 3. [`epilogue`]: fragment → global copies that would store fewer than
//!    16 bytes per access become fragment → shared scratch → global
//!    (16-byte stores); the scratch takes a dead shared buffer's memory when
//!    it fits there ([`crate::CompileOptions::stage_epilogues`] turns it off;
//!    the schedule drops it when over the shared-memory limit).
//! 4. [`pipeline`] (an analysis): which `pipelined` loops and copies are
//!    software-pipelined, which shared buffers get stage copies.
//! 5. [`lower`]: the lowering core, Tile IR → Thread IR (uniform scalar
//!    code, unrolled parallel nests, vectorized masked copies, cp.async
//!    global → shared copies, reductions by registers → shuffles → shared
//!    memory, thread-0 side effects, gemm on mma.sync or wgmma), with the
//!    schedule's hooks: the cp.async pipeline's loops, TMA stage copies, the
//!    warp-specialized loop (`crate::schedule::*`).
//! 6. [`pack_cvt`]: f32 → f16/bf16 conversions paired into one
//!    `cvt.rn.{f16,bf16}x2.f32` (one ALU instruction instead of two on the
//!    XU pipe `ex2` shares, and no repacking of the halves).
//! 7. [`wgmma_wait`]: each gemm's `wgmma.wait_group 0` moves down to the
//!    first statement that depends on its wgmmas (around a loop's back-edge
//!    to before the next iteration's barrier).
//! 8. [`cp_async_wait`]: a straight-line `cp.async.wait_group 0` (the copy
//!    before a pipelined loop) moves past the independent work after it
//!    (the loop prologue's TMA issue), so both loads are in flight at once.
//! 9. [`barriers`]: `bar.sync` exactly where shared-memory dependences need
//!    one (RAW, WAR, WAW, across loop back-edges), after a cp.async wait
//!    where the writer was a cp.async; in functions whose wgmmas read shared
//!    memory, `fence.proxy.async` before each barrier that follows generic
//!    shared writes.
//! 10. [`merge_branches`]: consecutive branches of one warpgroup (around
//!     the statements on its fragments, `policy(Warpgroup(w))`) become one.
//! 11. [`split_warpgroups`]: a warp-specialized consumers' loop split into
//!     one copy per consumer warpgroup, each with its own branches resolved
//!     ([`crate::CompileOptions::wsloop_split_warpgroups`]).
//! 12. [`arrivals`]: in such a split loop, a barrier one warpgroup need
//!     not wait at becomes its `barrier.arrive`, the other's
//!     `barrier.sync` ([`crate::CompileOptions::wsloop_arrivals`]).
//! 13. [`trace`] (a debugging build, [`crate::CompileOptions::trace`]): a
//!     `%clock64` stamp after every synchronizing instruction, recorded by
//!     each warpgroup's thread 0 of the first blocks.
//! 14. PTX emission ([`crate::ptx`]): a mechanical print of the Thread IR.
//!
//! Steps 6 to 14 and the shared-memory limit (the target's,
//! [`crate::target::TargetInfo::shared_limit`]) are `crate::compiled::finish`,
//! which every schedule ends with.

pub mod arrivals;
pub mod barriers;
pub mod cp_async_wait;
pub mod epilogue;
pub mod layout_infer;
pub mod lower;
pub mod merge_branches;
pub mod pack_cvt;
pub mod pipeline;
pub mod split_warpgroups;
pub mod trace;
pub mod wgmma_wait;

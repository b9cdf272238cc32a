//! The passes, in the order [`crate::compile`] runs them:
//!
//! 1. `verify` ([`crate::verify`]): the Tile IR invariants (types, shapes,
//!    scopes, extents).
//! 2. [`layout_infer`]: a layout for every fragment and parallel nest
//!    (gemm accumulators get the mma.sync layout, or on sm_90a the wgmma
//!    one for the gemms [`crate::hopper::wgmma_shape`] accepts; gemm shared
//!    operands a swizzled shared layout, in 64-column panels when wgmma reads
//!    rows wider than 128 bytes; otherwise blocked distributions; reductions
//!    derive replicated layouts; conflicts are errors naming both uses).
//! 3. [`epilogue`]: fragment → global copies that would store fewer than
//!    16 bytes per access become fragment → shared scratch → global
//!    (16-byte stores); the scratch takes a dead shared buffer's memory when
//!    it fits there ([`crate::CompileOptions::stage_epilogues`] turns it off;
//!    [`crate::compile`] drops it when over the shared-memory limit).
//! 4. [`lower`]: Tile IR → Thread IR (uniform scalar code, unrolled parallel
//!    nests, vectorized masked copies, cp.async global → shared copies,
//!    software-pipelined loops as [`pipeline`] decides, reductions by
//!    registers → shuffles → shared memory, thread-0 side effects; gemm →
//!    ldmatrix + mma.sync in `lower_gemm.rs`, a child module of `lower`, or
//!    on sm_90a wgmma with shared-memory descriptors in `lower/wgmma.rs`).
//! 5. [`wgmma_wait`]: each gemm's `wgmma.wait_group 0` moves down to the
//!    first statement that depends on its wgmmas (around a loop's back-edge
//!    to before the next iteration's barrier).
//! 6. [`barriers`]: `bar.sync` exactly where shared-memory dependences need
//!    one (RAW, WAR, WAW, across loop back-edges), after a cp.async wait
//!    where the writer was a cp.async; in functions whose wgmmas read shared
//!    memory, `fence.proxy.async` before each barrier that follows generic
//!    shared writes.
//! 7. PTX emission ([`crate::ptx`]): a mechanical print of the Thread IR.
//!
//! On sm_90a, [`crate::compile_variants`] also runs the passes a second
//! time for [`warp_specialize`] when it takes the kernel (a pipelined GEMM
//! main loop: TMA-able copies and gemms): layout inference with wgmma
//! accumulators, epilogue staging unless the accumulator is TMA-stored, and
//! the lowering with the loop replaced by the warp-specialized schedule
//! (`lower/warp_specialized.rs`: a producer warpgroup issuing TMA into
//! mbarrier-guarded stages, the kernel's threads consuming them with wgmma,
//! `setmaxnreg` between them; persistent over the grid's tiles when the loop
//! ends in a TMA store). That variant comes first; the runtime takes it when
//! its tensors are TMA-addressable, else the general one.

pub mod barriers;
pub mod epilogue;
pub mod layout_infer;
pub mod lower;
pub mod pipeline;
pub mod warp_specialize;
pub mod wgmma_wait;

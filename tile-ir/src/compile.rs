//! The pass pipeline, in order, in one place (see [`crate::passes`]).
//!
//! Expects a kernel as the frontend builds it; verifies it first. Guarantees
//! PTX for the requested target or a list of errors located at the
//! statements they concern; never panics on a kernel it cannot lower.

use crate::ir::{Kernel, SpanId};
use crate::passes::layout_infer::LayoutPlan;
use crate::passes::{barriers, epilogue, layout_infer, lower, pipeline, warp_specialize, wgmma_wait};
use crate::{thread_ir, CompileError, Target};

/// The result of compiling one kernel for one target.
#[derive(Clone, Debug)]
pub struct Compiled {
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
    /// runtime uses one per SM). Launched with the whole grid, it is the
    /// ordinary kernel.
    pub persistent: bool,
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
    /// Make a warp-specialized variant with a TMA store persistent when it
    /// can be (see [`Compiled::persistent`]).
    pub persistent: bool,
    /// On sm_90a, issue the pipelined copies that TMA can do as TMA boxes
    /// completing on per-stage mbarriers (`passes/lower/tma_copy.rs`). The
    /// result then takes tensor maps: [`compile_variants`] makes it a
    /// variant of its own, before the general one (off by default).
    pub tma_copies: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { stage_epilogues: true, tma_store: true, persistent: true, tma_copies: false }
    }
}

/// Compiles a kernel for one target.
pub fn compile(kernel: &Kernel, target: Target) -> Result<Compiled, Vec<CompileError>> {
    compile_with(kernel, target, CompileOptions::default())
}

/// Every variant of a kernel for one target, preferred first: on sm_90a a
/// warp-specialized TMA + wgmma variant (when the kernel has a pipelined
/// loop that [`crate::passes::warp_specialize`] takes), which needs its
/// mapped tensors TMA-addressable ([`crate::abi::tma_addressable`]); then
/// the general lowering with TMA pipelined copies
/// ([`CompileOptions::tma_copies`], same requirement) when it has any; then
/// the general variant, which runs on any tensors. The runtime launches the
/// first variant whose requirements the arguments meet.
pub fn compile_variants(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
) -> Result<Vec<Compiled>, Vec<CompileError>> {
    crate::verify::verify(kernel)?;
    let general = compile_verified_with(kernel, target, CompileOptions { tma_copies: false, ..options })?;
    let mut out = Vec::new();
    if let Some(ws) = crate::passes::warp_specialize::compile(kernel, target, options) {
        out.push(ws?);
    }
    if target == Target::Sm90a {
        // The general lowering with TMA pipelined copies, when it has any;
        // a failure there leaves the general variant alone.
        if let Ok(tma) = compile_verified_with(kernel, target, CompileOptions { tma_copies: true, ..options }) {
            if !tma.tensor_maps.is_empty() {
                out.push(tma);
            }
        }
    }
    out.push(general);
    Ok(out)
}

/// Compiles a kernel for one target with explicit [`CompileOptions`].
pub fn compile_with(kernel: &Kernel, target: Target, options: CompileOptions) -> Result<Compiled, Vec<CompileError>> {
    crate::verify::verify(kernel)?;
    compile_verified_with(kernel, target, options)
}

/// Compiles a kernel that the caller has verified (or built by hand with
/// statements the verifier does not know yet): every pass after `verify`.
/// The passes still report what they cannot lower as errors.
pub fn compile_verified(kernel: &Kernel, target: Target) -> Result<Compiled, Vec<CompileError>> {
    compile_verified_with(kernel, target, CompileOptions::default())
}

/// [`compile_verified`] with explicit [`CompileOptions`].
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
pub fn compile_verified_with(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
) -> Result<Compiled, Vec<CompileError>> {
    if kernel.threads == 0 || kernel.threads % 32 != 0 || kernel.threads > 1024 {
        return Err(vec![CompileError::new(
            SpanId::NONE,
            format!("threads = {} must be a multiple of 32 between 32 and 1024", kernel.threads),
        )]);
    }
    let plan = layout_infer::infer_layouts_for(kernel, target)?;
    if options.stage_epilogues {
        let mut staged_plan = plan.clone();
        let (staged, any) = epilogue::stage_epilogues(kernel, &mut staged_plan);
        if any {
            // Staging is an optimization: when its scratch does not fit (no
            // dead buffer to take, no shared memory left), or lowering it
            // fails, the direct stores below are the answer.
            if let Ok(func) = lower::lower_opts(&staged, target, &staged_plan, None, options.tma_copies) {
                if func.shared_bytes <= pipeline::shared_limit(target) {
                    return finish(&staged, target, &staged_plan, func);
                }
            }
        }
    }
    let func = lower::lower_opts(kernel, target, &plan, None, options.tma_copies)?;
    finish(kernel, target, &plan, func)
}

/// The warp-specialized variant (see [`crate::passes::warp_specialize`]):
/// layouts with wgmma accumulators, epilogue staging as usual, the
/// specialized lowering. Errors when the kernel has no plan or a pass fails.
pub(crate) fn compile_warp_specialized(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
) -> Result<Compiled, Vec<CompileError>> {
    let no_plan =
        || vec![CompileError::new(SpanId::NONE, format!("kernel `{}` cannot be warp-specialized", kernel.name))];
    let mut ws = warp_specialize::plan(kernel).ok_or_else(no_plan)?;
    if !options.tma_store {
        ws.store = None;
    }
    ws.persistent &= options.persistent && ws.store.is_some();
    let plan = layout_infer::infer_layouts_with(kernel, &ws.accumulators())?;
    // A TMA store of the accumulator stages through shared memory itself.
    if options.stage_epilogues && ws.store.is_none() {
        let mut staged_plan = plan.clone();
        let (staged, any) = epilogue::stage_epilogues(kernel, &mut staged_plan);
        if any {
            if let Some(mut staged_ws) = warp_specialize::plan(&staged) {
                staged_ws.store = None;
                staged_ws.persistent = false;
                if let Ok(func) = lower::lower_with(&staged, target, &staged_plan, Some(&staged_ws)) {
                    if func.shared_bytes <= pipeline::shared_limit(target) {
                        return finish(&staged, target, &staged_plan, func);
                    }
                }
            }
        }
    }
    let func = lower::lower_with(kernel, target, &plan, Some(&ws))?;
    finish(kernel, target, &plan, func)
}

/// Barriers, the shared-memory limit and PTX emission.
fn finish(
    kernel: &Kernel,
    target: Target,
    plan: &LayoutPlan,
    mut func: thread_ir::Function,
) -> Result<Compiled, Vec<CompileError>> {
    wgmma_wait::defer_wgmma_waits(&mut func.body);
    barriers::insert_barriers(&mut func.body);
    let limit = pipeline::shared_limit(target);
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
    })
}

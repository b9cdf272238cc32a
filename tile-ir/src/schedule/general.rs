//! The general schedule: the lowering core over the whole kernel, with the
//! cp.async pipeline for every loop it takes ([`super::cp_async_pipeline`])
//! and, on request, TMA stage copies ([`super::tma_copy`]). It applies to
//! every kernel the core can lower and runs on any tensors (without TMA
//! copies), so it ends every list of variants.
//!
//! Expects a verified kernel (or one built by hand). Guarantees: threads a
//! multiple of 32 up to 1024; layouts for the target; fragment → global
//! copies staged through shared memory when
//! [`CompileOptions::stage_epilogues`] and the result fits (else the direct
//! stores); the [`Compiled::schedule`] named after what the lowering did
//! ([`name_of`]).
//!
//! `compile_with_stages` serves the TMA-copy schedule: the same
//! lowering with other stage hooks.

use super::cp_async_pipeline::{CpAsyncStages, PipelineLowering, StageHooks};
use crate::compiled::{finish, CompileOptions, Compiled};
use crate::ir::{Kernel, SpanId};
use crate::passes::{epilogue, layout_infer, lower, pipeline};
use crate::{CompileError, Target};
use std::rc::Rc;

/// The schedule's name ([`Compiled::schedule`]).
pub const NAME: &str = "general";

/// Compiles `kernel` with the general lowering (see the module doc), the
/// plain cp.async pipeline for its pipelined loops
/// ([`CompileOptions::tma_copies`] is the driver's to read).
pub fn compile(kernel: &Kernel, target: Target, options: CompileOptions) -> Result<Compiled, Vec<CompileError>> {
    compile_with_stages(kernel, target, options, &|| Box::new(CpAsyncStages))
}

/// [`compile`], the pipeline's stages issued through `stages()`'s hooks
/// (the TMA-copy schedule's, [`super::tma_copy`]).
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
pub(crate) fn compile_with_stages(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
    stages: &dyn Fn() -> Box<dyn StageHooks>,
) -> Result<Compiled, Vec<CompileError>> {
    if kernel.threads == 0 || kernel.threads % 32 != 0 || kernel.threads > 1024 {
        return Err(vec![CompileError::new(
            SpanId::NONE,
            format!("threads = {} must be a multiple of 32 between 32 and 1024", kernel.threads),
        )]);
    }
    let plan = layout_infer::infer_layouts_for(kernel, target)?;
    let divisors = lower::Divisors::of(kernel, &options);
    if options.stage_epilogues {
        let mut staged_plan = plan.clone();
        let (staged, any) = epilogue::stage_epilogues(kernel, &mut staged_plan);
        if any {
            // Staging is an optimization: when its scratch does not fit (no
            // dead buffer to take, no shared memory left), or lowering it
            // fails, the direct stores below are the answer.
            let lowering = Rc::new(PipelineLowering::new(&staged, stages(), &options));
            if let Ok(func) = lower::lower(&staged, target, &staged_plan, lowering, &divisors) {
                if func.shared_bytes <= target.info().shared_limit {
                    let name = name_of(&staged);
                    return finish(&staged, target, &staged_plan, func, name, &options);
                }
            }
        }
    }
    let lowering = Rc::new(PipelineLowering::new(kernel, stages(), &options));
    let func = lower::lower(kernel, target, &plan, lowering, &divisors)?;
    let name = name_of(kernel);
    finish(kernel, target, &plan, func, name, &options)
}

/// The schedule a general lowering of `kernel` amounts to:
/// `"cp_async_pipeline"` when the pipeline analysis takes one of its loops,
/// else `"general"` (the TMA-copy schedule renames its variant).
pub fn name_of(kernel: &Kernel) -> &'static str {
    if !pipeline::plan(kernel).loops.is_empty() {
        super::cp_async_pipeline::NAME
    } else {
        NAME
    }
}

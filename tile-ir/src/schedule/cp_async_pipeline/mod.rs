//! The cp.async pipeline schedule: every loop that
//! [`crate::passes::pipeline::plan`] takes is software-pipelined, its
//! pipelined copies issued `stages - 1` iterations ahead into stage buffers
//! as cp.async groups (`pipelined_loop.rs` has the loop's schedule,
//! `reduced_copy.rs` the strength-reduced issue of copies whose origin
//! advances affinely).
//!
//! Expects a verified kernel. Applies when the pipeline analysis takes at
//! least one loop ([`plan`]); the lowering is then the general one (see
//! [`super::general`]) with these loops pipelined, and it runs on any
//! tensors. Guarantees what `pipelined_loop.rs` states: the same results as
//! the loop run serially.
//!
//! A schedule built on this one changes how a stage's copies are issued and
//! waited for through `StageHooks` (the TMA-copy schedule,
//! [`super::tma_copy`], issues the copies TMA can do as TMA boxes).

mod pipelined_loop;
mod reduced_copy;

use super::not_applicable::NotApplicable;
use crate::ir::{BufferId, Expr, Kernel, Stmt as TStmt, TileRef, VarId};
use crate::passes::lower::{Lx, ScheduleLowering, R};
use crate::passes::pipeline::{self, PipelinePlan};
use crate::thread_ir::{Operand, Reg};
use crate::CompileOptions;
use reduced_copy::ReducedCopies;

/// The schedule's name (`Compiled::schedule`).
pub const NAME: &str = "cp_async_pipeline";

/// The pipeline analysis of `kernel`, when it takes a loop.
pub fn plan(kernel: &Kernel) -> Result<PipelinePlan, NotApplicable> {
    let plan = pipeline::plan(kernel);
    if plan.loops.is_empty() {
        let mut why = String::from(
            "the kernel has no `pipelined(n, stages)` loop (stages ≥ 2, outside parallel loops) with a copy the pipeline can issue ahead (global → shared, its origin depending on the loop variable only through values it can compute early)",
        );
        for r in &plan.refusals {
            why.push_str("; ");
            why.push_str(r);
        }
        return Err(NotApplicable::new(why));
    }
    Ok(plan)
}

/// How a schedule built on the pipeline issues and waits for a stage's
/// copies. The defaults are the plain cp.async pipeline's (nothing extra).
pub(crate) trait StageHooks {
    /// Before the core places buffers (see [`ScheduleLowering::place_buffers`]).
    fn place_buffers(&self, _lx: &mut Lx<'_>, _plan: &PipelinePlan) {}
    /// A pipelined buffer's alignment, given the core's.
    fn buffer_alignment(&self, _buf: BufferId, align: i64) -> i64 {
        align
    }
    /// After the core placed buffers.
    fn after_buffers(&self, _lx: &mut Lx<'_>, _plan: &PipelinePlan) {}
    /// Whether these hooks issue the pipelined copy into `buf` themselves
    /// (then it is neither strength-reduced nor versioned on alignment).
    fn issues(&self, _buf: BufferId) -> bool {
        false
    }
    /// At the start of issuing wait batch `batch` (see
    /// [`pipeline::wait_batches`]) of stage `stage` of the loop over `var`.
    fn begin_stage(&self, _lx: &mut Lx<'_>, _var: VarId, _stage: &Operand, _batch: usize) -> R<()> {
        Ok(())
    }
    /// Issues the pipelined copy `src → dst` of the stage being issued;
    /// `false`: not one of these hooks' copies.
    fn issue_copy(&self, _lx: &mut Lx<'_>, _src: &TileRef, _dst: &TileRef) -> R<bool> {
        Ok(false)
    }
    /// After the stage's copies are issued.
    fn end_stage(&self) {}
    /// In the steady state, after the cp.async wait for wait batch `batch`
    /// of stage `cur`.
    fn wait_stage(&self, _lx: &mut Lx<'_>, _var: VarId, _cur: Reg, _batch: usize) {}
}

/// The plain cp.async pipeline: no stage hooks.
pub(crate) struct CpAsyncStages;

impl StageHooks for CpAsyncStages {}

/// The pipeline's state while one kernel is lowered.
pub(crate) struct PipelineLowering {
    /// Which loops are pipelined and which shared buffers have stages.
    pub(crate) plan: PipelinePlan,
    /// Strength-reduced pipelined copies of the pipelined loops being
    /// lowered, by destination shared buffer (see `reduced_copy.rs`).
    pub(crate) reduced: ReducedCopies,
    /// What the schedule built on the pipeline adds to a stage.
    pub(crate) stages: Box<dyn StageHooks>,
}

impl PipelineLowering {
    /// The pipeline of `kernel` (the loops [`pipeline::plan`] takes; none
    /// is fine: the lowering is then the general one), with `stages`.
    pub(crate) fn new(kernel: &Kernel, stages: Box<dyn StageHooks>, options: &CompileOptions) -> PipelineLowering {
        let mut plan = pipeline::plan(kernel);
        plan.one_wait_batch = !options.per_copy_waits;
        PipelineLowering { plan, reduced: ReducedCopies::default(), stages }
    }
}

impl ScheduleLowering for PipelineLowering {
    fn place_buffers(&self, lx: &mut Lx<'_>) {
        self.stages.place_buffers(lx, &self.plan);
    }

    fn stages_of(&self, buf: BufferId) -> u32 {
        self.plan.stages_of(buf)
    }

    fn buffer_alignment(&self, buf: BufferId, align: i64) -> i64 {
        self.stages.buffer_alignment(buf, align)
    }

    fn after_buffers(&self, lx: &mut Lx<'_>) {
        self.stages.after_buffers(lx, &self.plan);
    }

    fn lower_loop(
        &self,
        lx: &mut Lx<'_>,
        _s: &TStmt,
        var: VarId,
        start: &Expr,
        end: &Expr,
        body: &[TStmt],
    ) -> Option<R<()>> {
        let pl = self.plan.loops.get(&var)?.clone();
        Some(lx.lower_pipelined(self, var, start, end, body, &pl))
    }
}

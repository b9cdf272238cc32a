//! The warp-specialized loop schedule (sm_90a): any pipelined loop whose
//! copies TMA can do, run by a producer warpgroup issuing those copies into
//! an mbarrier ring while the kernel's own threads (the consumers) run
//! everything else: the statements before the loop, its whole body (gemms on
//! wgmma, reductions, `parallel` loops, fragment copies, masks, scalar code)
//! and the statements after it. FlashAttention's main loop is the case it
//! is made for.
//!
//! - `plan.rs`: whether a kernel has the shape this schedule takes
//!   ([`WslPlan`], or the reason it does not), and which of its rings the
//!   blocks of a thread block cluster load once for all of them (TMA
//!   multicast: MLA's two row blocks of a chunk read the same KV);
//! - `lower.rs`: the barriers, the split into producer and consumers, the
//!   consumers' loop over the stages (the last gemm left in flight across
//!   its back-edge, chained gemms), the multicast rings' shares and
//!   cluster-wide releases;
//! - `producer.rs`: the producer's code: the pre-loop copies and the loop of
//!   TMA boxes;
//! - `turns.rs`: the first gemm issued one iteration ahead and the
//!   ping-pong of two consumer warpgroups (FA3's), and both;
//! - `defer.rs`: the consumers' loop with the body's last gemm issued one
//!   iteration late, after the next iteration's first (FA3's
//!   intra-warpgroup overlap);
//! - `rotate.rs`: one warpgroup's opening chain of gemms (MLA's scores)
//!   issued at the end of the previous iteration, behind its last gemm;
//! - `pieces.rs`: per-piece barriers, one per TMA box of a stage whose
//!   first reader is a gemm, waited for right before the wgmmas reading it;
//! - `observers.rs`: where the other consumers of a pieced stage that one
//!   warpgroup's gemm reads first need not wait for its pieces (barriers
//!   order it for them);
//! - `persistent.rs`: the persistent variant (its own schedule name,
//!   [`PERSISTENT_NAME`], preferred to the plain one): both sides loop over
//!   the grid's blocks as tiles, the rings' phases carried across tiles and
//!   the pre-loop copies (Q) reloaded per tile behind a full/empty pair.
//!
//! Expects a verified kernel; [`compile`] runs layout inference for the
//! target (wgmma where the core takes it), epilogue staging, the lowering
//! core with this schedule's hooks (the stage buffers multi-buffered and
//! 1024-byte aligned, the pipelined copies left to the producer) and the
//! back end, whose `bar.sync`s in consumer code become named barriers over
//! the consumers ([`crate::thread_ir::Function::barrier_threads`]).
//! Guarantees a variant that computes what the general one does and needs
//! its mapped tensors TMA-addressable ([`crate::abi::tma_addressable`]).

mod defer;
mod lower;
mod observers;
mod persistent;
mod pieces;
mod plan;
mod producer;
mod rotate;
mod turns;

use lower::WslLowering;
pub use plan::{plan, plan_persistent, WslPlan};

use crate::compiled::{finish, CompileOptions, Compiled};
use crate::ir::{BufferId, Expr, Kernel, SpanId, Stmt as TStmt, VarId};
use crate::passes::lower::{Lx, ScheduleLowering, R};
use crate::passes::{epilogue, layout_infer};
use crate::{CompileError, Target};
use std::rc::Rc;

/// The schedule's name ([`Compiled::schedule`]).
pub const NAME: &str = "warp_specialized_loop";

/// The persistent variant's schedule name ([`Compiled::schedule`];
/// `TILE_SKIP_SCHEDULES` names it to launch the plain variant instead).
pub const PERSISTENT_NAME: &str = crate::abi::TILE_COUNTER_SCHEDULE;

/// The warp-specialized loop variant of `kernel` (see the module doc).
/// Errors when the kernel has no plan or a pass fails.
pub fn compile(kernel: &Kernel, target: Target, options: CompileOptions) -> Result<Compiled, Vec<CompileError>> {
    let wsl = plan(kernel, target, options).map_err(|na| {
        vec![CompileError::new(
            SpanId::NONE,
            format!("kernel `{}` cannot be warp-specialized: {}", kernel.name, na.reason),
        )]
    })?;
    compile_planned(kernel, target, options, wsl)
}

/// [`compile`] with the kernel's plan ([`plan`]) made already.
pub fn compile_planned(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
    wsl: WslPlan,
) -> Result<Compiled, Vec<CompileError>> {
    let persistent = wsl.persistent;
    let name = if persistent { PERSISTENT_NAME } else { NAME };
    let layouts = layout_infer::infer_layouts_for(kernel, target)?;
    let divisors = crate::passes::lower::Divisors::of(kernel, &options);
    if options.stage_epilogues {
        let mut staged_layouts = layouts.clone();
        let (staged, any) = epilogue::stage_epilogues(kernel, &mut staged_layouts);
        if persistent {
            // A scratch over a dead buffer would be overwritten by the
            // producer's loads of the next tile (stages, Q) while this
            // tile's epilogue still reads it: its own memory instead.
            staged_layouts.aliases.clear();
        }
        if any {
            // As in the general schedule: staging is an optimization, the
            // direct stores below are the answer when it does not fit.
            let staged_plan =
                if persistent { plan_persistent(&staged, target, options) } else { plan(&staged, target, options) };
            if let Ok(staged_wsl) = staged_plan {
                let lowering = Rc::new(WslLowering::new(staged_wsl, &options));
                if let Ok(func) = crate::passes::lower::lower(&staged, target, &staged_layouts, lowering, &divisors) {
                    if func.shared_bytes <= target.info().shared_limit {
                        return finish(&staged, target, &staged_layouts, func, name, &options);
                    }
                }
            }
        }
    }
    let func =
        crate::passes::lower::lower(kernel, target, &layouts, Rc::new(WslLowering::new(wsl, &options)), &divisors)?;
    finish(kernel, target, &layouts, func, name, &options)
}

impl ScheduleLowering for WslLowering {
    fn place_buffers(&self, lx: &mut Lx<'_>) {
        lx.wsl_setup(self);
    }

    fn stages_of(&self, buf: BufferId) -> u32 {
        self.plan.pipe.stages_of(buf)
    }

    fn owner_gemm_waits_outside(&self) -> bool {
        self.owner_waits_outside.get()
    }

    /// TMA boxes start on their swizzle pattern's 1024 bytes.
    fn buffer_alignment(&self, buf: BufferId, align: i64) -> i64 {
        if self.plan.pipe.stages.contains_key(&buf) || self.issues_before_loop(buf) {
            align.max(1024)
        } else {
            align
        }
    }

    fn after_buffers(&self, lx: &mut Lx<'_>) {
        lx.wsl_barriers(self);
    }

    /// The persistent variant binds them per tile.
    fn binds_block_indices(&self) -> bool {
        self.plan.persistent
    }

    /// A copy before the loop that the producer issues: the consumers wait.
    fn lower_stmt(&self, lx: &mut Lx<'_>, s: &TStmt) -> Option<R<()>> {
        lx.wsl_pre_copy_wait(self, s)
    }

    fn lower_body(&self, lx: &mut Lx<'_>, body: &[TStmt]) -> Option<R<()>> {
        Some(lx.lower_wsl_body(self, body))
    }

    fn lower_loop(
        &self,
        lx: &mut Lx<'_>,
        s: &TStmt,
        var: VarId,
        start: &Expr,
        end: &Expr,
        body: &[TStmt],
    ) -> Option<R<()>> {
        std::ptr::eq(s, &lx.k.body[self.plan.loop_index])
            .then(|| lx.lower_wsl_consumer_loop(self, var, start, end, body))
    }
}

//! The warp-specialized GEMM schedule (sm_90a): a pipelined GEMM main loop
//! run by a producer warpgroup issuing TMA into mbarrier-guarded stages and
//! the kernel's own threads consuming them with wgmma.
//!
//! - `plan.rs`: whether a kernel has the shape this schedule takes, and how
//!   ([`WsPlan`], or the reason it does not);
//! - `lower.rs`: the loop's schedule (stage buffers, barriers, the split
//!   into producer and consumers, their loops, the wgmmas);
//! - `store.rs`: the TMA-store option ([`crate::CompileOptions::tma_store`]):
//!   the accumulator stored right after the loop through shared panels;
//! - `persistent.rs`: the persistent option
//!   ([`crate::CompileOptions::persistent`]): each block runs the grid's
//!   tiles `ctaid.x + i·nctaid.x`.
//!
//! Expects a verified kernel; [`compile`] runs layout inference with the
//! plan's wgmma accumulators, epilogue staging (unless the accumulator is
//! TMA-stored), the lowering core with this schedule's hooks, and the back
//! end. Guarantees a variant that computes what the general one does and
//! needs its mapped tensors TMA-addressable ([`crate::abi::tma_addressable`]).

mod lower;
mod persistent;
mod plan;
mod store;

use lower::WsLowering;
pub(crate) use plan::{cluster_loop, cluster_uniform, count_pipelined, has_load};
pub use plan::{plan, TmaOperand, WsGemm, WsPlan, WsStore};

use crate::compiled::{finish, CompileOptions, Compiled};
use crate::ir::{Expr, Kernel, SpanId, Stmt as TStmt, StmtKind, VarId};
use crate::passes::lower::{Lx, ScheduleLowering, R};
use crate::passes::{epilogue, layout_infer};
use crate::{CompileError, Target};
use std::rc::Rc;

/// The schedule's name ([`Compiled::schedule`]).
pub const NAME: &str = "warp_specialized_gemm";

/// The warp-specialized variant of `kernel` (see the module doc): layouts
/// with wgmma accumulators, epilogue staging as usual, the specialized
/// lowering. Errors when the kernel has no plan or a pass fails.
pub fn compile(kernel: &Kernel, target: Target, options: CompileOptions) -> Result<Compiled, Vec<CompileError>> {
    let ws = plan(kernel, target).map_err(|na| {
        vec![CompileError::new(
            SpanId::NONE,
            format!("kernel `{}` cannot be warp-specialized: {}", kernel.name, na.reason),
        )]
    })?;
    compile_planned(kernel, target, options, ws)
}

/// [`compile`] with the kernel's plan ([`plan`]) made already.
pub fn compile_planned(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
    mut ws: WsPlan,
) -> Result<Compiled, Vec<CompileError>> {
    if !options.tma_store {
        ws.store = None;
    }
    ws.persistent &= options.persistent && ws.store.is_some();
    let layouts = layout_infer::infer_layouts_with(kernel, &ws.accumulators())?;
    let divisors = crate::passes::lower::Divisors::of(kernel, &options);
    // A TMA store of the accumulator stages through shared memory itself.
    if options.stage_epilogues && ws.store.is_none() {
        let mut staged_layouts = layouts.clone();
        let (staged, any) = epilogue::stage_epilogues(kernel, &mut staged_layouts);
        if any {
            if let Ok(mut staged_ws) = plan(&staged, target) {
                staged_ws.store = None;
                staged_ws.persistent = false;
                let lowering = Rc::new(WsLowering::new(staged_ws));
                if let Ok(func) = crate::passes::lower::lower(&staged, target, &staged_layouts, lowering, &divisors) {
                    if func.shared_bytes <= target.info().shared_limit {
                        return finish(&staged, target, &staged_layouts, func, NAME, &options);
                    }
                }
            }
        }
    }
    let func = crate::passes::lower::lower(kernel, target, &layouts, Rc::new(WsLowering::new(ws)), &divisors)?;
    finish(kernel, target, &layouts, func, NAME, &options)
}

impl ScheduleLowering for WsLowering {
    fn place_buffers(&self, lx: &mut Lx<'_>) {
        lx.ws_setup(self);
    }

    /// A persistent variant binds each tile's block indices from its linear
    /// tile index (`persistent.rs`), and runs as a 1-D grid of its own.
    fn binds_block_indices(&self) -> bool {
        self.plan.persistent
    }

    /// The schedule's gemms are its own wgmmas; the others stay on mma.sync.
    fn wgmma_gemms(&self) -> bool {
        false
    }

    fn lower_body(&self, lx: &mut Lx<'_>, body: &[TStmt]) -> Option<R<()>> {
        self.plan.persistent.then(|| lx.lower_ws_persistent(self, body))
    }

    fn lower_stmt(&self, lx: &mut Lx<'_>, s: &TStmt) -> Option<R<()>> {
        let st = self.plan.store.as_ref()?;
        match (std::ptr::eq(s, &lx.k.body[st.index]), &s.kind) {
            (true, StmtKind::Copy { dst, .. }) => Some(lx.lower_ws_store(self, st, dst)),
            _ => None,
        }
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
        std::ptr::eq(s, &lx.k.body[self.plan.loop_index]).then(|| lx.lower_ws_loop(self, var, start, end, body))
    }
}

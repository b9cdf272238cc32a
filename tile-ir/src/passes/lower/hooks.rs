//! The points where a schedule plugs into the lowering core.
//!
//! Expects each schedule (`crate::schedule`) to implement
//! [`ScheduleLowering`] for the state it needs while its kernel is lowered
//! (its plan, the shared memory it placed, the barriers it declared) and to
//! hand it to [`super::lower`]. Guarantees that the core calls each hook at
//! one fixed point, and that a hook left at its default changes nothing: the
//! plain lowering is the one with every hook at its default.
//!
//! The core keeps the schedule in an `Rc` and clones it out around a call,
//! so a hook may call back into the core (a pipelined loop lowers its body
//! with [`Lx::stmt`], which may meet another pipelined loop). A hook's
//! mutable state is therefore behind `Cell`/`RefCell`, borrowed only for
//! the duration of a lookup, never across a call into the core.

use super::*;

/// A schedule's part in lowering one kernel (see the module doc).
pub(crate) trait ScheduleLowering {
    /// Before the core places the kernel's buffers: place the shared
    /// buffers the schedule owns (the core skips buffers already in
    /// [`Lx::shared`]), reserve shared memory, declare parameters (tensor
    /// maps) and the launch shape.
    fn place_buffers(&self, _lx: &mut Lx<'_>) {}

    /// How many stage copies the core gives shared buffer `buf` (1: not
    /// multi-buffered). The stages are `stride` bytes apart
    /// ([`Lx::stage_stride`]); code selects one through [`Lx::shared_stage`].
    fn stages_of(&self, _buf: BufferId) -> u32 {
        1
    }

    /// The byte alignment of shared buffer `buf` (and of each of its stage
    /// copies), given the one the core would use.
    fn buffer_alignment(&self, _buf: BufferId, align: i64) -> i64 {
        align
    }

    /// After every buffer is placed (barriers the schedule allocates after
    /// the buffers, their initialization in the entry code).
    fn after_buffers(&self, _lx: &mut Lx<'_>) {}

    /// Whether gemms may use wgmma ([`crate::hopper::wgmma_shape`]); a
    /// schedule that runs its own wgmmas keeps the others on mma.sync.
    fn wgmma_gemms(&self) -> bool {
        true
    }

    /// The whole kernel body, instead of the core's statement-by-statement
    /// lowering (`None`: the core lowers it).
    fn lower_body(&self, _lx: &mut Lx<'_>, _body: &[TStmt]) -> Option<R<()>> {
        None
    }

    /// A statement outside parallel nests, before the core looks at it
    /// (`None`: the core lowers it).
    fn lower_stmt(&self, _lx: &mut Lx<'_>, _s: &TStmt) -> Option<R<()>> {
        None
    }

    /// A serial or pipelined loop outside parallel nests, once the core
    /// has checked its variable (`None`: the core lowers it as a serial
    /// loop).
    fn lower_loop(
        &self,
        _lx: &mut Lx<'_>,
        _s: &TStmt,
        _var: VarId,
        _start: &Expr,
        _end: &Expr,
        _body: &[TStmt],
    ) -> Option<R<()>> {
        None
    }
}

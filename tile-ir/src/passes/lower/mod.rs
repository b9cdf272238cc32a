//! The lowering core: Tile IR → Thread IR (the SIMT path), with the hook
//! points the schedules plug into (`ScheduleLowering`, below).
//!
//! Expects a verified kernel, a [`LayoutPlan`] from [`super::layout_infer`]
//! and a schedule's `ScheduleLowering` (`crate::schedule`; the core knows
//! no schedule). Produces one Thread IR [`Function`] in which:
//! - uniform code (outside parallel nests) is executed redundantly by every
//!   thread; its side effects on global or shared memory are done by thread 0
//!   only (guarded `if`s, non-uniform);
//! - each parallel nest is unrolled over the registers of its layout; the
//!   thread holding an iteration's elements runs it, guarded by the layout's
//!   validity (padding, idle threads) and, for replicated layouts, by "first
//!   replica" before side effects on memory;
//! - fragments live in registers (one virtual register per element held),
//!   local buffers in registers of every thread (dynamic indices become
//!   unrolled selects);
//! - shared buffers and reduction scratch are carved out of the dynamic
//!   shared memory; every shared access names its [`Region`] and computes
//!   its address through `Lx::shared_addr` / `Lx::shared_offset`, which
//!   apply the buffer's [`SharedLayout`] (swizzled for tensor-core operands)
//!   and the buffer's current stage offset (`Lx::shared_stage`);
//! - `Gemm` becomes ldmatrix + mma.sync (`gemm_mma.rs`), or on sm_90a,
//!   when [`crate::hopper::wgmma_gemm`] accepts it, wgmma (`gemm_wgmma.rs`);
//! - global accesses are bounds-checked, 16-byte vectorized when alignment is
//!   provable (statically, or by a uniform run-time test of the innermost
//!   extent), with per-element guarded fallbacks at the edges;
//! - global → shared copies become `cp.async` (`cp_async.rs`: 16-byte `.cg`
//!   where the vector path applies, 4/8-byte `.ca` otherwise; zero-fill
//!   masks the edges), committed and waited for at once, except when a
//!   schedule issues them in a pipeline stage (`Lx::issue_copy`).
//!
//! No barriers are inserted here except for explicit `Barrier` statements
//! and those a schedule emits: [`super::barriers`] does that.
//!
//! Files, one job each: `mod.rs` (entry point, the state, the schedule
//! hooks), `emit.rs` (emission helpers), `setup.rs` (parameters,
//! buffer placement, the staged-memory budget), `coords.rs` (layout
//! coordinates as operands), `address.rs` (integer arithmetic, global and
//! shared addressing), `expr.rs` (expressions, conversions), `memory.rs`
//! (loads, stores, fragments, locals, `fill`), `stmt.rs` (statements, serial
//! loops), `nest.rs` (parallel nests), `copy.rs` (tile copies), `cp_async.rs`
//! (cp.async chunks), `reduce.rs` (reductions), `gemm_mma.rs` (ldmatrix +
//! mma.sync), `gemm_wgmma.rs` (wgmma).

mod address;
mod coords;
mod copy;
mod cp_async;
mod divide;
mod emit;
mod expr;
mod gemm_mma;
mod gemm_wgmma;
mod memory;
mod nest;
mod reduce;
mod setup;
mod stmt;

use super::layout_infer::{const_int, nest_positions, parallel_nest, LayoutPlan, Nest};
use crate::ir::{
    BinOp, BufferId, DType, Expr, Extent, Kernel, LoopKind, ParamKind, ReduceOp, Scope, SpanId, Stmt as TStmt,
    StmtKind, TileRef, UnOp, Value, VarId, VarKind,
};
use crate::layout::{FragLayout, RootLayout, SharedLayout, ThreadField};
use crate::target::Feature;
use crate::thread_ir::{Address, Function, Inst, Operand, Reg, RegClass, Region, Space, Special, Stmt, SMEM};
use crate::{CompileError, Target};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

pub(crate) use divide::Divisors;
pub(crate) use nest::row_guard_loads;

pub(crate) type R<T> = Result<T, CompileError>;

/// Registers one fragment or local buffer may take per thread (the
/// hardware has 255; beyond that the unrolled code would only spill).
const MAX_REGS_PER_THREAD: usize = crate::verify::MAX_REGS_PER_THREAD as usize;

#[derive(Clone, Debug)]
pub(crate) struct Val {
    pub(crate) op: Operand,
    pub(crate) ty: DType,
}

pub(crate) struct TensorInfo {
    pub(crate) ptr: Reg,
    /// Extents as `s32` operands, and as `s64` operands.
    pub(crate) dims: Vec<Operand>,
    pub(crate) dims64: Vec<Operand>,
}

pub(crate) struct NestCtx {
    layout: FragLayout,
    vars: Vec<VarId>,
    /// The register being executed, per nest dim.
    l: Vec<i64>,
    /// "This thread is the first replica" when the nest's layout is replicated.
    primary: Option<Reg>,
}

/// A side of a copy.
#[derive(Clone)]
pub(crate) enum Side {
    /// A window of a tensor: one origin coordinate per tensor dim; tile
    /// dim `a` runs along tensor dim `dims[a]` (the others are squeezed).
    Global {
        buf: BufferId,
        origin: Vec<Operand>,
        dims: Vec<usize>,
    },
    Shared(BufferId),
    Frag(BufferId),
    Local(BufferId),
}

impl Side {
    /// Whether a global side's innermost tile dim is the tensor's innermost
    /// dim (elements along it are contiguous in memory). Always true for
    /// the other sides.
    pub(crate) fn contiguous(&self) -> bool {
        match self {
            Side::Global { origin, dims, .. } => dims.last().is_none_or(|&d| d + 1 == origin.len()),
            _ => true,
        }
    }
}

pub(crate) fn class_of(t: DType) -> RegClass {
    match t {
        DType::F16 | DType::BF16 => RegClass::B16,
        DType::F32 => RegClass::F32,
        DType::I32 | DType::U32 => RegClass::B32,
        DType::I64 => RegClass::B64,
        DType::Bool => RegClass::Pred,
    }
}

pub(crate) fn mov_ty(t: DType) -> &'static str {
    match class_of(t) {
        RegClass::B16 => "b16",
        RegClass::F32 => "f32",
        RegClass::B32 => "b32",
        RegClass::B64 => "b64",
        RegClass::Pred => "pred",
    }
}

pub(crate) fn int_ty(t: DType) -> Option<&'static str> {
    match t {
        DType::I32 => Some("s32"),
        DType::U32 => Some("u32"),
        DType::I64 => Some("s64"),
        _ => None,
    }
}

pub(crate) fn bits_ty(t: DType) -> &'static str {
    if t == DType::I64 {
        "b64"
    } else {
        "b32"
    }
}

pub(crate) fn mem_ty(t: DType) -> &'static str {
    match t {
        DType::F16 | DType::BF16 => "b16",
        DType::F32 => "f32",
        DType::I32 => "s32",
        DType::U32 => "u32",
        DType::I64 => "s64",
        DType::Bool => "u8",
    }
}

pub(crate) fn log2(x: i64) -> i64 {
    63 - (x.max(1) as u64).leading_zeros() as i64
}

/// A schedule's part in lowering one kernel: the points where it plugs
/// into the core.
///
/// Each schedule (`crate::schedule`) implements it for the state it needs
/// while its kernel is lowered (its plan, the shared memory it placed, the
/// barriers it declared) and hands it to [`lower`]. The core calls each
/// hook at one fixed point; a hook left at its default changes nothing (the
/// plain lowering is the one with every hook at its default).
///
/// The core keeps the schedule in an `Rc` and clones it out around a call,
/// so a hook may call back into the core (a pipelined loop lowers its body
/// with `Lx::stmt`, which may meet another pipelined loop). A hook's
/// mutable state is therefore behind `Cell`/`RefCell`, borrowed only for
/// the duration of a lookup, never across a call into the core.
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

    /// Whether the schedule binds the block indices itself (per tile, from
    /// its own linear tile index: the persistent GEMM), so that the core
    /// leaves them at `ctaid` rather than unfolding a folded grid
    /// ([`crate::abi::folds_grid`]).
    fn binds_block_indices(&self) -> bool {
        false
    }

    /// Whether a gemm of one warpgroup whose accumulator's registers
    /// another warpgroup's fragment also takes ends with its
    /// `wgmma.wait_group 0` after the warpgroup's branch, run by every
    /// thread, instead of inside it (`Lx::stmt`), for the statement being
    /// lowered: where no other warpgroup has a wgmma in flight then (the
    /// wait is a no-op for them), what ptxas needs to keep the wgmmas
    /// pipelined (C7514 otherwise: MLA's seesaw in the plain
    /// warp-specialized loop); elsewhere it made ptxas serialize them
    /// (C7515: the persistent loop; a loop whose last gemm stays in flight
    /// across iterations).
    fn owner_gemm_waits_outside(&self) -> bool {
        false
    }

    /// Whether gemms may use wgmma ([`crate::hopper::wgmma_gemm`]); a
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

/// Lowers `kernel` to a Thread IR function, with `schedule`'s hooks
/// (`crate::schedule`: each schedule builds the [`ScheduleLowering`] it
/// needs; the lowering core knows none of them).
pub(crate) fn lower(
    kernel: &Kernel,
    target: Target,
    plan: &LayoutPlan,
    schedule: Rc<dyn ScheduleLowering>,
    divisors: &Divisors,
) -> Result<Function, Vec<CompileError>> {
    let mut lx = Lx {
        divisors: divisors.clone(),
        divisor_regs: Vec::new(),
        schedule: schedule.clone(),
        k: kernel,
        target,
        plan,
        f: Function { name: ptx_identifier(&kernel.name), threads: kernel.threads, ..Function::default() },
        prologue: Vec::new(),
        blocks: vec![Vec::new()],
        span: SpanId::NONE,
        vars: HashMap::new(),
        var_mult: HashMap::new(),
        nest_bound: HashSet::new(),
        tid: Reg(0),
        is_t0: Reg(0),
        smem: Reg(0),
        tensors: HashMap::new(),
        shared: HashMap::new(),
        cur_op: 0,
        smem_top: 0,
        next_region: kernel.buffers.len() as u32,
        reduce_scratch: None,
        frags: HashMap::new(),
        locals: HashMap::new(),
        nest: None,
        tbases: HashMap::new(),
        warpgroup_preds: HashMap::new(),
        warpgroup_barrier: None,
        vote_wait: false,
        owned_sets: Vec::new(),
        ldm_bases: HashMap::new(),
        shared_stage: HashMap::new(),
        affine: HashMap::new(),
        shared_bases: HashMap::new(),
        errors: Vec::new(),
        stage_stride: HashMap::new(),
        footprint: HashMap::new(),
        local_prologue: None,
        region_override: HashMap::new(),
        loop_depth: 0,
        prints: 0,
    };
    lx.setup();
    lx.check_staged_budget();
    // A buffer that got no registers or memory would make every statement
    // using it fail with follow-up (internal) errors.
    if !lx.errors.is_empty() {
        return Err(lx.errors);
    }
    match schedule.lower_body(&mut lx, &kernel.body) {
        Some(Err(e)) => lx.errors.push(e),
        Some(Ok(())) => {}
        None => lx.lower_block(&kernel.body),
    }
    if !lx.errors.is_empty() {
        return Err(lx.errors);
    }
    let mut f = lx.f;
    f.shared_bytes = ((lx.smem_top + 15) / 16 * 16) as u32;
    let mut all = Vec::new();
    // A programmatic dependent waits for the kernel before it first, so
    // that nothing it does reads memory that kernel is still writing.
    if kernel.dependent_launch && target.has(crate::target::Feature::GridDependency) {
        all.push(Stmt::Inst { inst: Inst::GridDepWait, guard: None });
    }
    all.append(&mut lx.prologue);
    all.append(&mut lx.blocks[0]);
    f.body = all;
    Ok(f)
}

/// The lowering state of one kernel: what the core tracks while it walks
/// the body. Nothing here belongs to one schedule; a schedule's own state
/// lives in its [`ScheduleLowering`].
pub(crate) struct Lx<'a> {
    /// The schedule's hooks (see [`ScheduleLowering`]).
    pub(crate) schedule: Rc<dyn ScheduleLowering>,
    pub(crate) k: &'a Kernel,
    pub(crate) target: Target,
    pub(crate) plan: &'a LayoutPlan,
    pub(crate) f: Function,
    /// Entry code (values that depend only on parameters and the thread index;
    /// they dominate everything).
    pub(crate) prologue: Vec<Stmt>,
    pub(crate) blocks: Vec<Vec<Stmt>>,
    pub(crate) span: SpanId,
    pub(crate) vars: HashMap<VarId, Reg>,
    /// Known power-of-two divisors of uniform `let` variables (alignment proofs).
    pub(crate) var_mult: HashMap<VarId, i64>,
    /// Variables bound inside the parallel nest being lowered.
    pub(crate) nest_bound: HashSet<VarId>,
    pub(crate) tid: Reg,
    pub(crate) is_t0: Reg,
    pub(crate) smem: Reg,
    /// Prints lowered so far: the next [`Inst::Printf`] id.
    pub(crate) prints: u32,
    pub(crate) tensors: HashMap<BufferId, TensorInfo>,
    pub(crate) shared: HashMap<BufferId, (i64, u32)>,
    /// The collective operation being lowered (see [`Region`]).
    pub(crate) cur_op: u32,
    pub(crate) smem_top: i64,
    pub(crate) next_region: u32,
    /// The reductions' shared cross-warp scratch: (offset, bytes, region id).
    pub(crate) reduce_scratch: Option<(i64, i64, u32)>,
    pub(crate) frags: HashMap<BufferId, Vec<Reg>>,
    pub(crate) locals: HashMap<BufferId, Vec<Reg>>,
    pub(crate) nest: Option<NestCtx>,
    pub(crate) tbases: HashMap<Vec<ThreadField>, Reg>,
    /// Per warpgroup `w`, the entry code's predicate "this thread is in
    /// warpgroup `w`" (its branches, [`Lx::owner_of`]).
    pub(crate) warpgroup_preds: HashMap<u32, Reg>,
    /// The entry code's `LOCAL_BARRIER + warpgroup`: each warpgroup's own
    /// barrier, for its votes ([`Lx::warpgroup_barrier_id`]).
    pub(crate) warpgroup_barrier: Option<Reg>,
    /// Set by a schedule for the next parallel nest: a row-guarded nest
    /// (`if alpha[i] != 1.0 { .. }`) on an accumulator a wgmma may still
    /// write runs under a warpgroup vote of its tests, `wgmma.wait_group 0`
    /// first where any thread takes one (`nest.rs`); any other nest waits
    /// first. Taken (reset) by the nest.
    pub(crate) vote_wait: bool,
    /// The register sets of fragments that one warpgroup holds
    /// ([`crate::layout::RootLayout::owner`]), and the warpgroups whose
    /// fragments took each: a fragment takes a set of another warpgroup's
    /// of its class and size that none of its warpgroup's took (a thread
    /// only ever runs its own warpgroup's statements: MLA's two halves of
    /// O, one per warpgroup, take one set of registers, as a split of one
    /// fragment over the warpgroups would; a whole set, so that wgmma's
    /// accumulator ranges stay the same for ptxas).
    pub(crate) owned_sets: Vec<(Vec<Reg>, Vec<u32>)>,
    /// Registers known to be `base + constant` (from `add_i32`).
    pub(crate) affine: HashMap<Reg, (Reg, i64)>,
    /// Per-thread shared addresses (with the `smem` base) of thread-part
    /// coordinates, computed in the prologue: (buffer, row, column) → register.
    pub(crate) shared_bases: HashMap<(BufferId, Option<Reg>, Option<Reg>), Reg>,
    /// An extra byte offset added to every address of a shared buffer while
    /// it is set (a software-pipelining stage's copy of the buffer: the
    /// pipelining pass allocates `stages` slots of `shared_layout(buf).bytes()`
    /// and sets the slot's offset here around the code that uses it). An
    /// immediate costs nothing; a register costs one add per access.
    pub(crate) shared_stage: HashMap<BufferId, Operand>,
    /// Per-thread ldmatrix row addresses (see `lower_gemm.rs`).
    pub(crate) ldm_bases: HashMap<(BufferId, Vec<ThreadField>, Vec<ThreadField>, i64), Reg>,
    pub(crate) errors: Vec<CompileError>,
    /// Bytes between consecutive stage copies of a multi-buffered shared buffer.
    pub(crate) stage_stride: HashMap<BufferId, i64>,
    /// Region used for the accesses of a buffer instead of its own (the
    /// pipeline's stage refills, which never touch the stage being read).
    pub(crate) region_override: HashMap<BufferId, Region>,
    /// Bytes of shared memory allocated to each shared buffer (all stages).
    pub(crate) footprint: HashMap<BufferId, i64>,
    /// While lowering a top-level copy through an epilogue scratch: the
    /// "entry code" it needs (per-thread bases, masks), placed right before
    /// it instead of in the entry block. A top-level statement dominates
    /// everything after it, so the caches of such values stay valid.
    pub(crate) local_prologue: Option<Vec<Stmt>>,
    /// Serial loops enclosing the statement being lowered.
    pub(crate) loop_depth: u32,
    /// The launch's divisors (`divide.rs`) and their parameters' registers.
    pub(crate) divisors: Divisors,
    pub(crate) divisor_regs: Vec<[Reg; 4]>,
}

/// `name` as a PTX identifier: other characters become `_`, and a leading
/// digit gets a `_` prefix.
pub fn ptx_identifier(name: &str) -> String {
    let mut s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

fn ty_b32(ty: &str) -> &'static str {
    match ty {
        "f32" => "f32",
        "s32" => "s32",
        _ => "u32",
    }
}

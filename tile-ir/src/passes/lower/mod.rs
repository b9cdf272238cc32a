//! Lowering: Tile IR → Thread IR (the SIMT path).
//!
//! Expects a verified kernel and a [`LayoutPlan`] from
//! [`super::layout_infer`]. Produces one Thread IR [`Function`] in which:
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
//!   apply the buffer's [`SharedLayout`] (swizzled for tensor-core operands);
//! - `Gemm` becomes ldmatrix + mma.sync (`lower_gemm.rs`), or on sm_90a,
//!   when [`crate::hopper::wgmma_shape`] accepts it, wgmma (`lower/wgmma.rs`);
//! - global accesses are bounds-checked, 16-byte vectorized when alignment is
//!   provable (statically, or by a uniform run-time test of the innermost
//!   extent), with per-element guarded fallbacks at the edges.
//!
//! - global → shared copies become `cp.async` (16-byte `.cg` where the
//!   vector path applies, 4/8-byte `.ca` otherwise; zero-fill masks the
//!   edges), committed and waited for at once, except in pipelined loops
//!   ([`super::pipeline`]), whose schedule is emitted by [`async_copy`].
//!
//! No barriers are inserted here except for explicit `Barrier` statements and
//! the one at the top of each pipelined iteration: [`super::barriers`] does that.

mod address;
mod async_copy;
mod coords;
mod copy;
mod emit;
mod expr;
mod gemm_mma;
mod gemm_wgmma;
mod memory;
mod nest;
mod reduce;
mod reduced_copy;
mod setup;
mod stmt;
mod tma_copy;
mod warp_specialized;

use super::layout_infer::{const_int, nest_positions, parallel_nest, LayoutPlan, Nest};
use super::pipeline::{self, PipelinePlan};
use super::warp_specialize::WsPlan;
use crate::ir::{
    BinOp, BufferId, DType, Expr, Extent, Kernel, LoopKind, ParamKind, ReduceOp, Scope, SpanId, Stmt as TStmt,
    StmtKind, TileRef, UnOp, Value, VarId, VarKind,
};
use crate::layout::{FragLayout, RootLayout, SharedLayout, ThreadField};
use crate::thread_ir::{Address, Function, Inst, Operand, Reg, RegClass, Region, Space, Special, Stmt, SMEM};
use crate::{CompileError, Target};
use std::collections::{HashMap, HashSet};

type R<T> = Result<T, CompileError>;

/// Registers one fragment or local buffer may take per thread (the
/// hardware has 255; beyond that the unrolled code would only spill).
const MAX_REGS_PER_THREAD: usize = 256;

#[derive(Clone, Debug)]
struct Val {
    op: Operand,
    ty: DType,
}

struct TensorInfo {
    ptr: Reg,
    /// Extents as `s32` operands, and as `s64` operands.
    dims: Vec<Operand>,
    dims64: Vec<Operand>,
}

struct NestCtx {
    layout: FragLayout,
    vars: Vec<VarId>,
    /// The register being executed, per nest dim.
    l: Vec<i64>,
    /// "This thread is the first replica" when the nest's layout is replicated.
    primary: Option<Reg>,
}

/// A side of a copy.
#[derive(Clone)]
enum Side {
    Global { buf: BufferId, origin: Vec<Operand>, lead: usize },
    Shared(BufferId),
    Frag(BufferId),
    Local(BufferId),
}

fn class_of(t: DType) -> RegClass {
    match t {
        DType::F16 | DType::BF16 => RegClass::B16,
        DType::F32 => RegClass::F32,
        DType::I32 | DType::U32 => RegClass::B32,
        DType::I64 => RegClass::B64,
        DType::Bool => RegClass::Pred,
    }
}

fn mov_ty(t: DType) -> &'static str {
    match class_of(t) {
        RegClass::B16 => "b16",
        RegClass::F32 => "f32",
        RegClass::B32 => "b32",
        RegClass::B64 => "b64",
        RegClass::Pred => "pred",
    }
}

fn int_ty(t: DType) -> Option<&'static str> {
    match t {
        DType::I32 => Some("s32"),
        DType::U32 => Some("u32"),
        DType::I64 => Some("s64"),
        _ => None,
    }
}

fn bits_ty(t: DType) -> &'static str {
    if t == DType::I64 {
        "b64"
    } else {
        "b32"
    }
}

fn mem_ty(t: DType) -> &'static str {
    match t {
        DType::F16 | DType::BF16 => "b16",
        DType::F32 => "f32",
        DType::I32 => "s32",
        DType::U32 => "u32",
        DType::I64 => "s64",
        DType::Bool => "u8",
    }
}

fn log2(x: i64) -> i64 {
    63 - (x.max(1) as u64).leading_zeros() as i64
}

/// Lowers `kernel` to a Thread IR function.
pub fn lower(kernel: &Kernel, target: Target, plan: &LayoutPlan) -> Result<Function, Vec<CompileError>> {
    lower_with(kernel, target, plan, None)
}

/// [`lower`], with the pipelined loop of `ws` warp-specialized
/// ([`warp_specialized`]).
pub fn lower_with(
    kernel: &Kernel,
    target: Target,
    plan: &LayoutPlan,
    ws: Option<&WsPlan>,
) -> Result<Function, Vec<CompileError>> {
    lower_opts(kernel, target, plan, ws, false)
}

/// [`lower_with`]; `tma_copies`: on sm_90a, issue the pipelined copies that
/// TMA can do as TMA boxes ([`tma_copy`]).
pub fn lower_opts(
    kernel: &Kernel,
    target: Target,
    plan: &LayoutPlan,
    ws: Option<&WsPlan>,
    tma_copies: bool,
) -> Result<Function, Vec<CompileError>> {
    let mut lx = Lx {
        tma_copies,
        tma_copy: HashMap::new(),
        tma_loops: HashMap::new(),
        tma_issue_stage: None,
        ws,
        ws_bars: 0,
        ws_store_base: 0,
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
        frags: HashMap::new(),
        locals: HashMap::new(),
        nest: None,
        tbases: HashMap::new(),
        ldm_bases: HashMap::new(),
        shared_stage: HashMap::new(),
        affine: HashMap::new(),
        shared_bases: HashMap::new(),
        errors: Vec::new(),
        pipe: pipeline::plan(kernel),
        stage_stride: HashMap::new(),
        footprint: HashMap::new(),
        local_prologue: None,
        region_override: HashMap::new(),
        in_pipeline_issue: false,
        loop_depth: 0,
        reduced: HashMap::new(),
    };
    lx.setup();
    lx.check_pipeline_budget();
    match ws {
        Some(w) if w.persistent => {
            if let Err(e) = lx.lower_ws_persistent(&kernel.body) {
                lx.errors.push(e);
            }
        }
        _ => lx.lower_block(&kernel.body),
    }
    if !lx.errors.is_empty() {
        return Err(lx.errors);
    }
    let mut f = lx.f;
    f.shared_bytes = ((lx.smem_top + 15) / 16 * 16) as u32;
    let mut all = lx.prologue;
    all.append(&mut lx.blocks[0]);
    f.body = all;
    Ok(f)
}

struct Lx<'a> {
    k: &'a Kernel,
    /// Issue TMA-able pipelined copies with TMA (`tma_copy.rs`).
    tma_copies: bool,
    /// The pipelined copies issued with TMA, by destination buffer.
    tma_copy: HashMap<BufferId, tma_copy::TmaCopy>,
    /// The barriers of the pipelined loops with TMA copies, by loop variable.
    tma_loops: HashMap<VarId, tma_copy::TmaLoop>,
    /// The stage being issued (while `in_pipeline_issue`), for TMA copies.
    tma_issue_stage: Option<Operand>,
    /// The warp specialization of the kernel's pipelined loop, if any.
    ws: Option<&'a WsPlan>,
    /// Byte offset of the warp-specialized loop's mbarriers in `smem`.
    ws_bars: i64,
    /// Byte offset of the TMA store's shared panels in `smem`.
    ws_store_base: i64,
    target: Target,
    plan: &'a LayoutPlan,
    f: Function,
    /// Entry code (values that depend only on parameters and the thread index;
    /// they dominate everything).
    prologue: Vec<Stmt>,
    blocks: Vec<Vec<Stmt>>,
    span: SpanId,
    vars: HashMap<VarId, Reg>,
    /// Known power-of-two divisors of uniform `let` variables (alignment proofs).
    var_mult: HashMap<VarId, i64>,
    /// Variables bound inside the parallel nest being lowered.
    nest_bound: HashSet<VarId>,
    tid: Reg,
    is_t0: Reg,
    smem: Reg,
    tensors: HashMap<BufferId, TensorInfo>,
    shared: HashMap<BufferId, (i64, u32)>,
    /// The collective operation being lowered (see [`Region`]).
    cur_op: u32,
    smem_top: i64,
    next_region: u32,
    frags: HashMap<BufferId, Vec<Reg>>,
    locals: HashMap<BufferId, Vec<Reg>>,
    nest: Option<NestCtx>,
    tbases: HashMap<Vec<ThreadField>, Reg>,
    /// Registers known to be `base + constant` (from `add_i32`).
    affine: HashMap<Reg, (Reg, i64)>,
    /// Per-thread shared addresses (with the `smem` base) of thread-part
    /// coordinates, computed in the prologue: (buffer, row, column) → register.
    shared_bases: HashMap<(BufferId, Option<Reg>, Option<Reg>), Reg>,
    /// An extra byte offset added to every address of a shared buffer while
    /// it is set (a software-pipelining stage's copy of the buffer: the
    /// pipelining pass allocates `stages` slots of `shared_layout(buf).bytes()`
    /// and sets the slot's offset here around the code that uses it). An
    /// immediate costs nothing; a register costs one add per access.
    pub(crate) shared_stage: HashMap<BufferId, Operand>,
    /// Per-thread ldmatrix row addresses (see `lower_gemm.rs`).
    ldm_bases: HashMap<(BufferId, Vec<ThreadField>, Vec<ThreadField>, i64), Reg>,
    errors: Vec<CompileError>,
    /// Which loops are software-pipelined and which shared buffers have stages.
    pipe: PipelinePlan,
    /// Bytes between consecutive stage copies of a multi-buffered shared buffer.
    stage_stride: HashMap<BufferId, i64>,
    /// Region used for the accesses of a buffer instead of its own (the
    /// pipeline's stage refills, which never touch the stage being read).
    region_override: HashMap<BufferId, Region>,
    /// Bytes of shared memory allocated to each shared buffer (all stages).
    footprint: HashMap<BufferId, i64>,
    /// While lowering a top-level copy through an epilogue scratch: the
    /// "entry code" it needs (per-thread bases, masks), placed right before
    /// it instead of in the entry block. A top-level statement dominates
    /// everything after it, so the caches of such values stay valid.
    local_prologue: Option<Vec<Stmt>>,
    /// Lowering the copies of a pipelined iteration: cp.asyncs are issued
    /// but neither committed nor waited for (the pipeline does that).
    in_pipeline_issue: bool,
    /// Serial loops enclosing the statement being lowered.
    loop_depth: u32,
    /// Strength-reduced pipelined copies of the pipelined loops being
    /// lowered, by destination shared buffer (see `reduced_copy.rs`).
    reduced: HashMap<BufferId, reduced_copy::ReducedCopy>,
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

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

mod async_copy;
mod reduced_copy;
mod tma_copy;
mod warp_specialized;
mod wgmma;

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

#[path = "lower_gemm.rs"]
mod gemm;

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

impl<'a> Lx<'a> {
    // ---------------------------------------------------------------- emission

    fn err(&self, msg: impl Into<String>) -> CompileError {
        CompileError::new(self.span, msg)
    }
    fn cur(&mut self) -> &mut Vec<Stmt> {
        if self.blocks.is_empty() {
            self.blocks.push(Vec::new());
        }
        let n = self.blocks.len() - 1;
        &mut self.blocks[n]
    }
    fn emit(&mut self, inst: Inst) {
        self.cur().push(Stmt::Inst { inst, guard: None });
    }
    fn emit_guarded(&mut self, inst: Inst, guard: Option<(Reg, bool)>) {
        self.cur().push(Stmt::Inst { inst, guard });
    }
    fn emit_pro(&mut self, inst: Inst) {
        self.push_pro(vec![Stmt::Inst { inst, guard: None }]);
    }
    /// Appends to the entry code, or to the local entry code of an epilogue
    /// copy (see [`Lx::local_prologue`]).
    pub(crate) fn push_pro(&mut self, code: Vec<Stmt>) {
        match &mut self.local_prologue {
            Some(local) => local.extend(code),
            None => self.prologue.extend(code),
        }
    }
    fn new_reg(&mut self, c: RegClass) -> Reg {
        self.f.new_reg(c)
    }
    fn op(&mut self, op: impl Into<String>, c: RegClass, args: Vec<Operand>) -> Reg {
        let dst = self.new_reg(c);
        self.emit(Inst::Op { op: op.into(), dst, args });
        dst
    }
    fn op_into(&mut self, op: impl Into<String>, dst: Reg, args: Vec<Operand>) {
        self.emit(Inst::Op { op: op.into(), dst, args });
    }
    fn mov(&mut self, dst: Reg, src: Operand, t: DType) {
        self.op_into(format!("mov.{}", mov_ty(t)), dst, vec![src]);
    }
    fn materialize(&mut self, v: &Val) -> Reg {
        match v.op {
            Operand::Reg(r) => r,
            _ => {
                if v.ty == DType::Bool {
                    let b = if let Operand::Imm(x) = v.op { x } else { 0 };
                    return self.const_pred(b != 0);
                }
                let r = self.new_reg(class_of(v.ty));
                self.mov(r, v.op.clone(), v.ty);
                r
            }
        }
    }
    fn const_pred(&mut self, b: bool) -> Reg {
        let r = self.op("mov.u32", RegClass::B32, vec![Operand::Imm(b as i64)]);
        self.op("setp.ne.u32", RegClass::Pred, vec![r.into(), Operand::Imm(0)])
    }
    /// Runs `f` with a fresh current block and returns what it emitted.
    fn capture(&mut self, f: impl FnOnce(&mut Self) -> R<()>) -> R<Vec<Stmt>> {
        self.blocks.push(Vec::new());
        let r = f(self);
        let b = self.blocks.pop().unwrap_or_default();
        r.map(|_| b)
    }
    /// Emits `then` under `cond` (directly when there is no condition).
    fn emit_if(&mut self, cond: Option<Reg>, uniform: bool, then: Vec<Stmt>, otherwise: Vec<Stmt>) {
        match cond {
            None => self.cur().extend(then),
            Some(c) => self.cur().push(Stmt::If { cond: c, negate: false, uniform, then, otherwise }),
        }
    }
    fn and_pred(&mut self, a: Option<Reg>, b: Option<Reg>) -> Option<Reg> {
        match (a, b) {
            (None, x) | (x, None) => x,
            (Some(a), Some(b)) => Some(self.op("and.pred", RegClass::Pred, vec![a.into(), b.into()])),
        }
    }

    // ------------------------------------------------------------------ setup

    fn setup(&mut self) {
        let k = self.k;
        self.tid = self.new_reg(RegClass::B32);
        let tid = self.tid;
        self.emit_pro(Inst::Op { op: "mov.u32".into(), dst: tid, args: vec![Operand::Special(Special::TidX)] });
        self.is_t0 = self.new_reg(RegClass::Pred);
        let t0 = self.is_t0;
        self.emit_pro(Inst::Op { op: "setp.eq.u32".into(), dst: t0, args: vec![tid.into(), Operand::Imm(0)] });
        self.smem = self.new_reg(RegClass::B32);
        let sm = self.smem;
        self.emit_pro(Inst::Op { op: "mov.u32".into(), dst: sm, args: vec![Operand::Symbol(SMEM.into())] });

        let mut pi = 0usize;
        // PTX identifiers: ASCII letters, digits and `_` (names are only hints).
        let mut pname = |n: &str| {
            pi += 1;
            let clean: String =
                n.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
            format!("p{}_{}", pi - 1, clean)
        };
        // Tensor pointers.
        let mut ptrs = Vec::new();
        for p in &k.params {
            if let ParamKind::Tensor(b) = p.kind {
                let name = pname(&p.name);
                self.f.params.push((name.clone(), ".u64"));
                let raw = self.new_reg(RegClass::B64);
                self.emit_pro(Inst::LdParam { ty: "u64", dst: raw, name });
                let g = self.new_reg(RegClass::B64);
                self.emit_pro(Inst::Op { op: "cvta.to.global.u64".into(), dst: g, args: vec![raw.into()] });
                ptrs.push((b, g));
            }
        }
        // Dynamic dims.
        let mut dim64 = HashMap::new();
        for &d in &k.dims {
            let name = pname(&k.var(d).name);
            self.f.params.push((name.clone(), ".s32"));
            let r = self.new_reg(RegClass::B32);
            self.emit_pro(Inst::LdParam { ty: "s32", dst: r, name });
            let r64 = self.new_reg(RegClass::B64);
            self.emit_pro(Inst::Op { op: "cvt.s64.s32".into(), dst: r64, args: vec![r.into()] });
            self.vars.insert(d, r);
            dim64.insert(d, r64);
        }
        // Scalars.
        for p in &k.params {
            if let ParamKind::Scalar(v) = p.kind {
                let t = k.var(v).dtype;
                let (pty, lty) = match t {
                    DType::F32 => (".f32", "f32"),
                    DType::I32 => (".s32", "s32"),
                    DType::U32 => (".u32", "u32"),
                    DType::F16 | DType::BF16 => (".b16", "b16"),
                    DType::I64 => (".s64", "s64"),
                    DType::Bool => (".u32", "u32"),
                };
                let name = pname(&p.name);
                self.f.params.push((name.clone(), pty));
                if t == DType::Bool {
                    let r = self.new_reg(RegClass::B32);
                    self.emit_pro(Inst::LdParam { ty: lty, dst: r, name });
                    let pr = self.new_reg(RegClass::Pred);
                    self.emit_pro(Inst::Op {
                        op: "setp.ne.u32".into(),
                        dst: pr,
                        args: vec![r.into(), Operand::Imm(0)],
                    });
                    self.vars.insert(v, pr);
                } else {
                    let r = self.new_reg(class_of(t));
                    self.emit_pro(Inst::LdParam { ty: lty, dst: r, name });
                    self.vars.insert(v, r);
                }
            }
        }
        for (b, ptr) in ptrs {
            let buf = k.buffer(b);
            let mut dims = Vec::new();
            let mut dims64 = Vec::new();
            for e in &buf.shape {
                match *e {
                    Extent::Const(c) => {
                        dims.push(Operand::Imm(c));
                        dims64.push(Operand::Imm(c));
                    }
                    Extent::Dyn(v) => {
                        dims.push(self.vars.get(&v).map(|r| Operand::Reg(*r)).unwrap_or(Operand::Imm(0)));
                        dims64.push(dim64.get(&v).map(|r| Operand::Reg(*r)).unwrap_or(Operand::Imm(0)));
                    }
                }
            }
            self.tensors.insert(b, TensorInfo { ptr, dims, dims64 });
        }
        // Block indices.
        for (i, v) in k.vars.iter().enumerate() {
            if let VarKind::BlockIdx(a) = v.kind {
                let r = self.new_reg(RegClass::B32);
                self.emit_pro(Inst::Op {
                    op: "mov.u32".into(),
                    dst: r,
                    args: vec![Operand::Special(Special::CtaId(a.min(2)))],
                });
                self.vars.insert(VarId(i as u32), r);
            }
        }
        if let Err(e) = self.rasterize_blocks() {
            self.errors.push(e);
        }
        // The warp-specialized loop's stage buffers come first (aligned).
        self.ws_setup();
        self.tma_copy_setup();
        // Buffers: shared offsets, fragment and local registers.
        let wgmma_align = self.wgmma_operand_alignment();
        for (i, b) in k.buffers.iter().enumerate() {
            let id = BufferId(i as u32);
            if self.shared.contains_key(&id) {
                continue;
            }
            let n: i64 = b.const_shape().map(|s| s.iter().product()).unwrap_or(0);
            match b.scope {
                Scope::Shared => {
                    let bytes = self.shared_layout(id).map(|l| l.bytes()).unwrap_or(n * b.dtype.size_bytes() as i64);
                    let stages = self.pipe.stages_of(id) as i64;
                    // Stage copies start 128-byte aligned, like buffers
                    // (wgmma operands: 8 rows of their swizzle span).
                    let align = wgmma_align.get(&id).copied().unwrap_or(128);
                    // TMA boxes start on their swizzle pattern's 1024 bytes.
                    let align = if self.is_tma_copy(id) { align.max(1024) } else { align };
                    let stride = (bytes + align - 1) / align * align;
                    let footprint = if stages > 1 { stride * stages } else { bytes };
                    // An epilogue scratch takes the memory (and the region,
                    // so that barriers order it after the last accesses) of
                    // a buffer dead from its first use on, when it fits.
                    let alias = self.plan.aliases.get(&id).and_then(|dead| {
                        let (off, region) = *self.shared.get(dead)?;
                        let room = self.footprint.get(dead).copied()?;
                        (stages == 1 && bytes <= room).then_some((off, region))
                    });
                    if let Some(place) = alias {
                        self.shared.insert(id, place);
                        continue;
                    }
                    let off = self.alloc_smem_aligned(footprint, align);
                    if stages > 1 {
                        self.stage_stride.insert(id, stride);
                    }
                    self.footprint.insert(id, footprint);
                    self.shared.insert(id, (off, i as u32));
                }
                Scope::Fragment => {
                    if let Some(l) = self.plan.frags.get(&id) {
                        if l.num_regs() > MAX_REGS_PER_THREAD {
                            self.errors.push(CompileError::new(
                                b.span,
                                format!(
                                    "fragment `{}` needs {} registers per thread with {} threads (at most {MAX_REGS_PER_THREAD}); use a smaller tile or more threads",
                                    b.name,
                                    l.num_regs(),
                                    k.threads
                                ),
                            ));
                            continue;
                        }
                        let regs = (0..l.num_regs()).map(|_| self.f.new_reg(class_of(b.dtype))).collect();
                        self.frags.insert(id, regs);
                    }
                }
                Scope::Local => {
                    if n > MAX_REGS_PER_THREAD as i64 {
                        self.errors.push(CompileError::new(
                            b.span,
                            format!(
                                "local `{}` has {n} elements (at most {MAX_REGS_PER_THREAD}); use shared memory",
                                b.name
                            ),
                        ));
                        continue;
                    }
                    let regs = (0..n.max(0)).map(|_| self.f.new_reg(class_of(b.dtype))).collect();
                    self.locals.insert(id, regs);
                }
                Scope::Global => {}
            }
        }
        self.tma_barrier_setup();
    }

    fn region_of(&self, buf: BufferId) -> Option<Region> {
        if let Some(r) = self.region_override.get(&buf) {
            return Some(*r);
        }
        self.shared.get(&buf).map(|s| Region { id: s.1, op: self.cur_op })
    }

    fn alloc_smem(&mut self, bytes: i64) -> i64 {
        self.alloc_smem_aligned(bytes, 128)
    }

    /// `bytes` of shared memory at an offset that is a multiple of `align`
    /// (a power of two ≥ 128).
    fn alloc_smem_aligned(&mut self, bytes: i64, align: i64) -> i64 {
        let off = (self.smem_top + align - 1) / align * align;
        self.smem_top = off + bytes.max(0);
        off
    }

    /// The thread part of dim `d`'s coordinate for the calling thread
    /// (computed once, in the prologue).
    pub(crate) fn tbase(&mut self, root: &RootLayout, d: usize) -> Operand {
        let fields = root.dims[d].fields.clone();
        self.thread_bits_value(&fields)
    }

    /// `Σ ((tid >> shift) & (count - 1)) · mult` over `fields`, in the prologue.
    pub(crate) fn thread_bits_value(&mut self, fields: &[ThreadField]) -> Operand {
        if fields.is_empty() {
            return Operand::Imm(0);
        }
        if let Some(r) = self.tbases.get(fields) {
            return Operand::Reg(*r);
        }
        let tid = self.tid;
        let mut acc: Option<Reg> = None;
        for f in fields {
            let a = self.new_reg(RegClass::B32);
            self.emit_pro(Inst::Op {
                op: "shr.u32".into(),
                dst: a,
                args: vec![tid.into(), Operand::Imm(f.shift as i64)],
            });
            let b = self.new_reg(RegClass::B32);
            self.emit_pro(Inst::Op { op: "and.b32".into(), dst: b, args: vec![a.into(), Operand::Imm(f.count - 1)] });
            let c = self.new_reg(RegClass::B32);
            match acc {
                None if f.mult.count_ones() == 1 => self.emit_pro(Inst::Op {
                    op: "shl.b32".into(),
                    dst: c,
                    args: vec![b.into(), Operand::Imm(log2(f.mult))],
                }),
                None => self.emit_pro(Inst::Op {
                    op: "mul.lo.s32".into(),
                    dst: c,
                    args: vec![b.into(), Operand::Imm(f.mult)],
                }),
                Some(prev) => self.emit_pro(Inst::Op {
                    op: "mad.lo.s32".into(),
                    dst: c,
                    args: vec![b.into(), Operand::Imm(f.mult), prev.into()],
                }),
            }
            acc = Some(c);
        }
        let r = acc.unwrap_or(tid);
        self.tbases.insert(fields.to_vec(), r);
        Operand::Reg(r)
    }

    /// The bits of `x` selected by `mask`, packed to the low end (`pext`).
    fn extract_bits(&mut self, x: Reg, mask: u64) -> Operand {
        let mut out: Option<Operand> = None;
        let mut packed = 0u32;
        let mut b = 0u32;
        while b < 32 {
            if mask & (1 << b) == 0 {
                b += 1;
                continue;
            }
            let start = b;
            while b < 32 && mask & (1 << b) != 0 {
                b += 1;
            }
            let width = b - start;
            let s = self.op("shr.u32", RegClass::B32, vec![x.into(), Operand::Imm(start as i64)]);
            let v = self.op("and.b32", RegClass::B32, vec![s.into(), Operand::Imm((1i64 << width) - 1)]);
            out = Some(match out {
                None => Operand::Reg(v),
                Some(prev) => Operand::Reg(self.op(
                    "mad.lo.s32",
                    RegClass::B32,
                    vec![v.into(), Operand::Imm(1i64 << packed), prev],
                )),
            });
            packed += width;
        }
        out.unwrap_or(Operand::Imm(0))
    }

    /// Coordinate along kept dim `a` of per-dim register index `l`.
    fn coord(&mut self, lay: &FragLayout, a: usize, l: i64) -> Operand {
        let d = lay.kept[a];
        let base = self.tbase(&lay.root, d);
        self.add_i32(base, Operand::Imm(lay.root.reg_offset(d, l)))
    }

    /// Whether the calling thread's register group `l` holds valid elements.
    fn valid_pred(&mut self, lay: &FragLayout, l: &[i64]) -> Option<Reg> {
        let mut p = None;
        let active = lay.root.active_threads();
        if active < self.k.threads as i64 {
            let tid = self.tid;
            let q = self.op("setp.lt.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(active)]);
            p = Some(q);
        }
        for (a, &d) in lay.kept.iter().enumerate() {
            let root = &lay.root;
            if !root.dim_padded(d) {
                continue;
            }
            // Valid when thread part + register offset < extent.
            let bound = root.shape[d] - root.reg_offset(d, l[a]);
            if bound > root.dims[d].max_thread_part() {
                continue;
            }
            let base = self.tbase(&lay.root.clone(), d);
            let q = if bound <= 0 {
                self.const_pred(false)
            } else {
                let b = self.materialize(&Val { op: base, ty: DType::I32 });
                self.op("setp.lt.s32", RegClass::Pred, vec![b.into(), Operand::Imm(bound)])
            };
            p = self.and_pred(p, Some(q));
        }
        p
    }

    // ------------------------------------------------------------- arithmetic

    fn add_i32(&mut self, a: Operand, b: Operand) -> Operand {
        match (&a, &b) {
            (Operand::Imm(x), Operand::Imm(y)) => Operand::Imm((*x as i32).wrapping_add(*y as i32) as i64),
            (_, Operand::Imm(0)) => a,
            (Operand::Imm(0), _) => b,
            (Operand::Imm(x), Operand::Reg(r)) | (Operand::Reg(r), Operand::Imm(x)) => {
                let (x, r) = (*x, *r);
                let d = self.op("add.s32", RegClass::B32, vec![r.into(), Operand::Imm(x)]);
                // Remember `d = r + x` so that shared addresses can fold `x`.
                let (base, off) = self.affine.get(&r).copied().unwrap_or((r, 0));
                self.affine.insert(d, (base, off + x));
                Operand::Reg(d)
            }
            _ => Operand::Reg(self.op("add.s32", RegClass::B32, vec![a, b])),
        }
    }
    /// `a · b + c` in 32 bits.
    fn mad_i32(&mut self, a: Operand, b: i64, c: Operand) -> Operand {
        if let Operand::Imm(x) = a {
            return self.add_i32(Operand::Imm((x as i32).wrapping_mul(b as i32) as i64), c);
        }
        Operand::Reg(self.op("mad.lo.s32", RegClass::B32, vec![a, Operand::Imm(b), c]))
    }
    /// Row-major element offset of `idx` in `shape` (32 bits).
    fn rowmajor_i32(&mut self, idx: &[Operand], shape: &[i64]) -> Operand {
        let mut off = Operand::Imm(0);
        for (i, x) in idx.iter().enumerate() {
            off = if i == 0 { x.clone() } else { self.mad_i32(off, shape[i], x.clone()) };
        }
        off
    }
    fn widen_s64(&mut self, x: Operand) -> Operand {
        match x {
            Operand::Imm(_) => x,
            _ => Operand::Reg(self.op("cvt.s64.s32", RegClass::B64, vec![x])),
        }
    }

    /// Byte address of element `coords` of global tensor `buf` (64-bit arithmetic).
    fn global_addr(&mut self, buf: BufferId, coords: &[Operand]) -> R<Reg> {
        let info = self.tensors.get(&buf).ok_or_else(|| self.err("internal: tensor parameter not bound"))?;
        let dims64 = info.dims64.clone();
        let ptr = info.ptr;
        let mut off = Operand::Imm(0);
        for (d, c) in coords.iter().enumerate() {
            let c64 = self.widen_s64(c.clone());
            if d == 0 {
                off = c64;
                continue;
            }
            off = match (&off, &dims64[d], &c64) {
                (Operand::Imm(a), Operand::Imm(b), Operand::Imm(c)) => Operand::Imm(a * b + c),
                _ => {
                    let a = match off {
                        Operand::Imm(_) => Operand::Reg(self.op("mov.b64", RegClass::B64, vec![off.clone()])),
                        _ => off.clone(),
                    };
                    Operand::Reg(self.op("mad.lo.s64", RegClass::B64, vec![a, dims64[d].clone(), c64]))
                }
            };
        }
        let size = self.k.buffer(buf).dtype.size_bytes() as i64;
        let addr = match off {
            Operand::Imm(o) => self.op("add.s64", RegClass::B64, vec![ptr.into(), Operand::Imm(o * size)]),
            _ => self.op("mad.lo.s64", RegClass::B64, vec![off, Operand::Imm(size), ptr.into()]),
        };
        Ok(addr)
    }

    /// `0 ≤ coords < dims` for a global tensor, with `extra` added to the
    /// innermost coordinate (vector end). `None` when statically true.
    fn in_bounds(&mut self, buf: BufferId, coords: &[Operand], extra: i64) -> R<Option<Reg>> {
        let dims = self.tensors.get(&buf).ok_or_else(|| self.err("internal: tensor parameter not bound"))?.dims.clone();
        let mut p = None;
        let n = coords.len();
        for d in 0..n {
            let c = if d + 1 == n { self.add_i32(coords[d].clone(), Operand::Imm(extra)) } else { coords[d].clone() };
            let q = match (&c, &dims[d]) {
                (Operand::Imm(x), Operand::Imm(y)) => {
                    if (*x as u32) < (*y as u32) {
                        continue;
                    }
                    self.const_pred(false)
                }
                (Operand::Imm(_), _) => {
                    let r = self.materialize(&Val { op: c, ty: DType::I32 });
                    self.op("setp.lt.u32", RegClass::Pred, vec![r.into(), dims[d].clone()])
                }
                _ => self.op("setp.lt.u32", RegClass::Pred, vec![c, dims[d].clone()]),
            };
            p = self.and_pred(p, Some(q));
        }
        Ok(p)
    }

    /// The address of element `idx` of shared buffer `buf`.
    ///
    /// Every access to a shared buffer goes through here (or through
    /// [`Lx::shared_offset`]), so that a buffer whose layout the compiler
    /// chose (a swizzled tensor-core operand, [`LayoutPlan::shared`]) is
    /// read and written consistently.
    pub(crate) fn shared_addr(&mut self, buf: BufferId, idx: &[Operand]) -> R<Address> {
        let (base, _) = *self.shared.get(&buf).ok_or_else(|| self.err("internal: shared buffer not allocated"))?;
        let addr = if let Some((reg, imm)) = self.shared_addr_hoisted(buf, idx)? {
            Address { base: reg.into(), offset: base + imm }
        } else {
            let off = self.shared_offset(buf, idx)?;
            let sm = self.smem;
            match off {
                Operand::Imm(o) => Address { base: sm.into(), offset: base + o },
                _ => {
                    let a = self.op("add.s32", RegClass::B32, vec![off, sm.into()]);
                    Address { base: a.into(), offset: base }
                }
            }
        };
        Ok(self.with_stage(buf, addr))
    }

    /// `addr` moved to the buffer's current pipelining slot ([`Lx::shared_stage`]).
    pub(crate) fn with_stage(&mut self, buf: BufferId, addr: Address) -> Address {
        match self.shared_stage.get(&buf).cloned() {
            None => addr,
            Some(Operand::Imm(x)) => Address { base: addr.base, offset: addr.offset + x },
            Some(extra) => {
                let b = self.op("add.s32", RegClass::B32, vec![addr.base, extra]);
                Address { base: b.into(), offset: addr.offset }
            }
        }
    }

    /// `Some((reg, imm))` with address = `reg + imm` (plus the buffer's
    /// offset) when `idx` is 2-D, each coordinate is a prologue (per-thread)
    /// register plus a constant, and the constants commute with the layout
    /// (the row constant is a whole number of swizzle periods; the column
    /// constant is zero or the layout is not swizzled): `reg` is then
    /// computed once, in the prologue, and the access costs no arithmetic.
    fn shared_addr_hoisted(&mut self, buf: BufferId, idx: &[Operand]) -> R<Option<(Reg, i64)>> {
        if idx.len() != 2 {
            return Ok(None);
        }
        let lay = self.shared_layout(buf)?;
        let split = |s: &Self, o: &Operand| -> Option<(Operand, i64)> {
            match o {
                Operand::Imm(x) => Some((Operand::Imm(0), *x)),
                Operand::Reg(r) => {
                    let (b, x) = s.affine.get(r).copied().unwrap_or((*r, 0));
                    s.tbases.values().any(|t| *t == b).then_some((Operand::Reg(b), x))
                }
                _ => None,
            }
        };
        let (Some((rt, cr)), Some((ct, cc))) = (split(self, &idx[0]), split(self, &idx[1])) else { return Ok(None) };
        if cr % lay.row_period() != 0 || (cr * lay.row_stride) % 256 != 0 || (cc != 0 && lay.swizzle.is_some()) {
            return Ok(None);
        }
        let as_reg = |o: &Operand| if let Operand::Reg(r) = o { Some(*r) } else { None };
        let key = (buf, as_reg(&rt), as_reg(&ct));
        let reg = match self.shared_bases.get(&key) {
            Some(r) => *r,
            None => {
                let mut reg = None;
                let code = self.capture(|s| {
                    let off = s.shared_offset(buf, &[rt, ct])?;
                    let sm = s.smem;
                    let a = s.add_i32(Operand::Reg(sm), off);
                    reg = Some(s.materialize(&Val { op: a, ty: DType::I32 }));
                    Ok(())
                })?;
                self.push_pro(code);
                let r = reg.ok_or_else(|| self.err("internal: shared base"))?;
                self.shared_bases.insert(key, r);
                r
            }
        };
        Ok(Some((reg, cr * lay.row_stride + cc * lay.elem)))
    }

    /// The layout of shared buffer `buf` (row-major unless layout inference chose another).
    pub(crate) fn shared_layout(&self, buf: BufferId) -> R<SharedLayout> {
        if let Some(l) = self.plan.shared.get(&buf) {
            return Ok(*l);
        }
        let b = self.k.buffer(buf);
        let shape = b.const_shape().ok_or_else(|| self.err("shared buffers need a constant shape"))?;
        let cols = shape.last().copied().unwrap_or(1);
        let rows = shape.iter().rev().skip(1).product::<i64>();
        Ok(SharedLayout::row_major(rows, cols, b.dtype.size_bytes() as i64))
    }

    /// The byte offset of element `idx` of shared buffer `buf` from the
    /// buffer's start, through the buffer's [`SharedLayout`] (swizzled for
    /// tensor-core operands). THE one place that maps shared coordinates to
    /// bytes: copies, element accesses in nests, ldmatrix (via the same
    /// layout) and the cp.async writes of pipelining must all use it.
    /// Constant coordinates fold to an immediate.
    ///
    /// For the pipelining pass (cp.async writes of a global→shared copy):
    /// call [`Lx::shared_addr`] with the tile coordinates of each 16-byte
    /// chunk. It returns `[reg + imm]` with `reg` computed once in the
    /// prologue when the coordinates are per-thread layout coordinates plus
    /// constants (what `coord()` gives), honours [`Lx::shared_stage`] (set
    /// it to a stage slot's byte offset while lowering that stage's copy or
    /// gemm), and the buffer's size is `shared_layout(buf).bytes()`. A
    /// 16-byte chunk never straddles swizzle units (the XOR moves whole
    /// 16-byte chunks), so a chunk that is contiguous in the tile is
    /// contiguous in shared memory.
    pub(crate) fn shared_offset(&mut self, buf: BufferId, idx: &[Operand]) -> R<Operand> {
        let b = self.k.buffer(buf);
        let shape = b.const_shape().ok_or_else(|| self.err("shared buffers need a constant shape"))?;
        let lay = self.shared_layout(buf)?;
        if idx.len() != shape.len() || idx.is_empty() {
            return Err(self.err(format!(
                "`{}` has {} dimensions but is indexed with {}",
                b.name,
                shape.len(),
                idx.len()
            )));
        }
        let n = idx.len();
        let row = self.rowmajor_i32(&idx[..n - 1], &shape[..n - 1]);
        let col = idx[n - 1].clone();
        if let (Operand::Imm(r), Operand::Imm(c)) = (&row, &col) {
            return Ok(Operand::Imm(lay.offset(*r, *c)));
        }
        if let Some(pc) = lay.panel_cols {
            // Panelled (wgmma operands, `SharedLayout::panelled`): the panel's
            // offset plus the offset inside the panel, whose layout has no panels.
            let inner = SharedLayout { cols: pc, panel_cols: None, ..lay };
            let (panel, c) = match &col {
                Operand::Imm(c) => (Operand::Imm(c / pc * lay.panel_bytes()), Operand::Imm(c % pc)),
                _ => {
                    let p = self.op("shr.u32", RegClass::B32, vec![col.clone(), Operand::Imm(log2(pc))]);
                    let p = self.op("mul.lo.s32", RegClass::B32, vec![p.into(), Operand::Imm(lay.panel_bytes())]);
                    let c = self.op("and.b32", RegClass::B32, vec![col.clone(), Operand::Imm(pc - 1)]);
                    (Operand::Reg(p), Operand::Reg(c))
                }
            };
            let off = self.swizzled_offset(&inner, row, c);
            return Ok(self.add_i32(off, panel));
        }
        Ok(self.swizzled_offset(&lay, row, col))
    }

    /// `row · stride + col · elem`, swizzled, for a layout without panels.
    fn swizzled_offset(&mut self, lay: &SharedLayout, row: Operand, col: Operand) -> Operand {
        if let (Operand::Imm(r), Operand::Imm(c)) = (&row, &col) {
            return Operand::Imm(lay.offset(*r, *c));
        }
        // row · stride + col · elem
        let lin = match &row {
            Operand::Imm(r) => {
                let c = self.mad_i32(col, lay.elem, Operand::Imm(0));
                self.add_i32(c, Operand::Imm(r * lay.row_stride))
            }
            _ => {
                let c = self.mad_i32(col, lay.elem, Operand::Imm(0));
                self.mad_i32(row.clone(), lay.row_stride, c)
            }
        };
        let Some((bits, shift)) = lay.swizzle else { return lin };
        // XOR the chunk bits with bits [shift + 4, +bits) of the row's byte offset.
        let x = match &row {
            Operand::Imm(r) => Operand::Imm(lay.xor_of_row(*r)),
            _ => {
                let rb = self.op("mul.lo.s32", RegClass::B32, vec![row.clone(), Operand::Imm(lay.row_stride)]);
                let sh = self.op("shr.u32", RegClass::B32, vec![rb.into(), Operand::Imm(shift as i64)]);
                Operand::Reg(self.op(
                    "and.b32",
                    RegClass::B32,
                    vec![sh.into(), Operand::Imm(((1i64 << bits) - 1) << 4)],
                ))
            }
        };
        if x == Operand::Imm(0) {
            return lin;
        }
        let l = self.materialize(&Val { op: lin, ty: DType::I32 });
        Operand::Reg(self.op("xor.b32", RegClass::B32, vec![l.into(), x]))
    }

    // ----------------------------------------------------------- conversions

    fn convert(&mut self, v: Val, to: DType) -> R<Val> {
        use DType::*;
        let from = v.ty;
        if from == to {
            return Ok(v);
        }
        // Fold constants.
        match (&v.op, to) {
            (Operand::Imm(x), I32) => return Ok(Val { op: Operand::Imm(*x as i32 as i64), ty: to }),
            (Operand::Imm(x), U32) => return Ok(Val { op: Operand::Imm(*x as u32 as i64), ty: to }),
            (Operand::Imm(x), I64) if from != U32 => return Ok(Val { op: Operand::Imm(*x), ty: to }),
            (Operand::Imm(x), F32) if from.is_int() => return Ok(Val { op: Operand::F32(*x as f32), ty: to }),
            (Operand::F32(x), F16) => return Ok(Val { op: Operand::B16(half::f16::from_f32(*x).to_bits()), ty: to }),
            (Operand::F32(x), BF16) => return Ok(Val { op: Operand::B16(half::bf16::from_f32(*x).to_bits()), ty: to }),
            _ => {}
        }
        let via_f32 = (matches!(from, F16 | BF16) && to != F32) || (matches!(to, F16 | BF16) && from != F32);
        if via_f32 {
            let mid = self.convert(v, F32)?;
            return self.convert(mid, to);
        }
        let src = self.materialize(&v);
        let c = class_of(to);
        let r = match (from, to) {
            (F32, F16) => self.op("cvt.rn.f16.f32", c, vec![src.into()]),
            (F32, BF16) => self.op("cvt.rn.bf16.f32", c, vec![src.into()]),
            (F16, F32) => self.op("cvt.f32.f16", c, vec![src.into()]),
            (BF16, F32) => {
                if self.target == Target::Sm90a {
                    self.op("cvt.f32.bf16", c, vec![src.into()])
                } else {
                    // bf16 is the high half of an f32.
                    let w = self.op("cvt.u32.u16", RegClass::B32, vec![src.into()]);
                    let s = self.op("shl.b32", RegClass::B32, vec![w.into(), Operand::Imm(16)]);
                    self.op("mov.b32", c, vec![s.into()])
                }
            }
            (F32, I32) => self.op("cvt.rzi.s32.f32", c, vec![src.into()]),
            (F32, U32) => self.op("cvt.rzi.u32.f32", c, vec![src.into()]),
            (F32, I64) => self.op("cvt.rzi.s64.f32", c, vec![src.into()]),
            (I32, F32) => self.op("cvt.rn.f32.s32", c, vec![src.into()]),
            (U32, F32) => self.op("cvt.rn.f32.u32", c, vec![src.into()]),
            (I64, F32) => self.op("cvt.rn.f32.s64", c, vec![src.into()]),
            (I32, U32) | (U32, I32) => src,
            (I32, I64) => self.op("cvt.s64.s32", c, vec![src.into()]),
            (U32, I64) => self.op("cvt.u64.u32", c, vec![src.into()]),
            (I64, I32) | (I64, U32) => self.op("cvt.u32.u64", c, vec![src.into()]),
            (Bool, F32) => self.op("selp.f32", c, vec![Operand::F32(1.0), Operand::F32(0.0), src.into()]),
            (Bool, I32) | (Bool, U32) => self.op("selp.b32", c, vec![Operand::Imm(1), Operand::Imm(0), src.into()]),
            (Bool, I64) => self.op("selp.b64", c, vec![Operand::Imm(1), Operand::Imm(0), src.into()]),
            (I32 | U32 | I64, Bool) => {
                let t = int_ty(from).unwrap_or("s32");
                self.op(format!("setp.ne.{t}"), c, vec![src.into(), Operand::Imm(0)])
            }
            (F32, Bool) => self.op("setp.neu.f32", c, vec![src.into(), Operand::F32(0.0)]),
            _ => return Err(self.err(format!("cannot convert {from} to {to}"))),
        };
        Ok(Val { op: r.into(), ty: to })
    }

    /// `use_swizzle(panel)`: rebinds the x and y block indices to the
    /// panel-rasterized order of `abi::rasterize` (the formula the interpreter
    /// and the tests share), in the prologue, before anything reads them.
    /// Rasterization only reorders blocks, so a kernel that does not bind
    /// both indices keeps the plain order.
    fn rasterize_blocks(&mut self) -> R<()> {
        let Some(panel) = self.k.rasterize else { return Ok(()) };
        let block_var =
            |axis: u8| self.k.vars.iter().position(|v| v.kind == VarKind::BlockIdx(axis)).map(|i| VarId(i as u32));
        let (Some(bx), Some(by)) = (block_var(0), block_var(1)) else { return Ok(()) };
        let (gx, gy) = (self.k.grid[0].clone(), self.k.grid[1].clone());
        let linear = Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, Expr::Var(by), gx.clone()), Expr::Var(bx));
        let (new_bx, new_by) = crate::abi::rasterize_exprs(panel, &gx, &gy, &linear);
        let mut regs = (None, None);
        let code = self.capture(|lx| {
            let x = lx.expr(&new_bx)?;
            let y = lx.expr(&new_by)?;
            regs = (Some(lx.materialize(&x)), Some(lx.materialize(&y)));
            Ok(())
        })?;
        self.push_pro(code);
        if let (Some(x), Some(y)) = regs {
            self.vars.insert(bx, x);
            self.vars.insert(by, y);
        }
        Ok(())
    }

    // ------------------------------------------------------------ expressions

    fn expr(&mut self, e: &Expr) -> R<Val> {
        match e {
            Expr::Const(c) => Ok(self.constant(*c)),
            Expr::Var(v) => {
                let r = self.vars.get(v).ok_or_else(|| {
                    self.err(format!("variable `{}` is used before it is bound", self.k.var(*v).name))
                })?;
                Ok(Val { op: Operand::Reg(*r), ty: self.k.var(*v).dtype })
            }
            Expr::Load { buf, index } => self.load(*buf, index),
            Expr::Unary { op, arg } => {
                let a = self.expr(arg)?;
                self.unary(*op, a)
            }
            Expr::Binary { op, lhs, rhs } => {
                let a = self.expr(lhs)?;
                let b = self.expr(rhs)?;
                self.binary(*op, a, b)
            }
            Expr::Fma { a, b, c } => {
                let (a, b, c) = (self.expr(a)?, self.expr(b)?, self.expr(c)?);
                let t = a.ty;
                if matches!(t, DType::F16 | DType::BF16) {
                    let a = self.convert(a, DType::F32)?;
                    let b = self.convert(b, DType::F32)?;
                    let c = self.convert(c, DType::F32)?;
                    let r = self.fma(a, b, c)?;
                    return self.convert(r, t);
                }
                self.fma(a, b, c)
            }
            Expr::Cast { to, arg } => {
                let a = self.expr(arg)?;
                self.convert(a, *to)
            }
            Expr::Select { cond, then, otherwise } => {
                let c = self.expr(cond)?;
                let c = self.materialize(&c);
                let a = self.expr(then)?;
                let b = self.expr(otherwise)?;
                let t = a.ty;
                if t == DType::Bool {
                    let (a, b) = (self.materialize(&a), self.materialize(&b));
                    let x = self.op("and.pred", RegClass::Pred, vec![c.into(), a.into()]);
                    let nc = self.op("not.pred", RegClass::Pred, vec![c.into()]);
                    let y = self.op("and.pred", RegClass::Pred, vec![nc.into(), b.into()]);
                    let r = self.op("or.pred", RegClass::Pred, vec![x.into(), y.into()]);
                    return Ok(Val { op: r.into(), ty: t });
                }
                let r = self.op(format!("selp.{}", mov_ty(t)), class_of(t), vec![a.op, b.op, c.into()]);
                Ok(Val { op: r.into(), ty: t })
            }
        }
    }

    fn constant(&mut self, c: Value) -> Val {
        let (op, ty) = match c {
            Value::I32(v) => (Operand::Imm(v as i64), DType::I32),
            Value::U32(v) => (Operand::Imm(v as i64), DType::U32),
            Value::I64(v) => (Operand::Imm(v), DType::I64),
            Value::F32(v) => (Operand::F32(v), DType::F32),
            Value::F16(v) => (Operand::B16(v.to_bits()), DType::F16),
            Value::BF16(v) => (Operand::B16(v.to_bits()), DType::BF16),
            Value::Bool(b) => (Operand::Reg(self.const_pred(b)), DType::Bool),
        };
        Val { op, ty }
    }

    fn fma(&mut self, a: Val, b: Val, c: Val) -> R<Val> {
        let t = a.ty;
        let ra = self.materialize(&a);
        let op = match t {
            DType::F32 => "fma.rn.f32".to_string(),
            DType::I32 | DType::U32 | DType::I64 => format!("mad.lo.{}", int_ty(t).unwrap_or("s32")),
            _ => return Err(self.err(format!("fma is not defined on {t}"))),
        };
        let r = self.op(op, class_of(t), vec![ra.into(), b.op, c.op]);
        Ok(Val { op: r.into(), ty: t })
    }

    fn unary(&mut self, op: UnOp, a: Val) -> R<Val> {
        let t = a.ty;
        let is_math = !matches!(op, UnOp::Not);
        if matches!(t, DType::F16 | DType::BF16) && is_math {
            let x = self.convert(a, DType::F32)?;
            let y = self.unary(op, x)?;
            return self.convert(y, t);
        }
        let x = self.materialize(&a);
        let c = class_of(t);
        let f32_only = |s: &Self| s.err(format!("`{op:?}` needs a float operand, found {t}"));
        let r = match (op, t) {
            (UnOp::Neg, DType::F32) => self.op("neg.f32", c, vec![x.into()]),
            (UnOp::Neg, DType::I32 | DType::U32) => self.op("neg.s32", c, vec![x.into()]),
            (UnOp::Neg, DType::I64) => self.op("neg.s64", c, vec![x.into()]),
            (UnOp::Not, DType::Bool) => self.op("not.pred", c, vec![x.into()]),
            (UnOp::Not, DType::I32 | DType::U32) => self.op("not.b32", c, vec![x.into()]),
            (UnOp::Not, DType::I64) => self.op("not.b64", c, vec![x.into()]),
            (UnOp::Abs, DType::F32) => self.op("abs.f32", c, vec![x.into()]),
            (UnOp::Abs, DType::I32) => self.op("abs.s32", c, vec![x.into()]),
            (UnOp::Abs, DType::I64) => self.op("abs.s64", c, vec![x.into()]),
            (UnOp::Abs, DType::U32) => x,
            (UnOp::Exp2, DType::F32) => self.op("ex2.approx.ftz.f32", c, vec![x.into()]),
            (UnOp::Exp, DType::F32) => {
                let y = self.op("mul.f32", c, vec![x.into(), Operand::F32(std::f32::consts::LOG2_E)]);
                self.op("ex2.approx.ftz.f32", c, vec![y.into()])
            }
            (UnOp::Log2, DType::F32) => self.op("lg2.approx.ftz.f32", c, vec![x.into()]),
            (UnOp::Log, DType::F32) => {
                let y = self.op("lg2.approx.ftz.f32", c, vec![x.into()]);
                self.op("mul.f32", c, vec![y.into(), Operand::F32(std::f32::consts::LN_2)])
            }
            (UnOp::Sqrt, DType::F32) => self.op("sqrt.rn.f32", c, vec![x.into()]),
            (UnOp::Rsqrt, DType::F32) => self.op("rsqrt.approx.ftz.f32", c, vec![x.into()]),
            _ => return Err(f32_only(self)),
        };
        Ok(Val { op: r.into(), ty: t })
    }

    fn binary(&mut self, op: BinOp, a: Val, b: Val) -> R<Val> {
        let t = a.ty;
        // Constant-fold 32-bit integer arithmetic (addresses, bounds).
        if let (Operand::Imm(x), Operand::Imm(y), DType::I32) = (&a.op, &b.op, t) {
            let (x, y) = (*x as i32, *y as i32);
            let v = match op {
                BinOp::Add => Some(x.wrapping_add(y)),
                BinOp::Sub => Some(x.wrapping_sub(y)),
                BinOp::Mul => Some(x.wrapping_mul(y)),
                BinOp::Div if y != 0 => Some(x.wrapping_div(y)),
                BinOp::Rem if y != 0 => Some(x.wrapping_rem(y)),
                BinOp::Min => Some(x.min(y)),
                BinOp::Max => Some(x.max(y)),
                _ => None,
            };
            if let Some(v) = v {
                return Ok(Val { op: Operand::Imm(v as i64), ty: t });
            }
        }
        if matches!(t, DType::F16 | DType::BF16) {
            let x = self.convert(a, DType::F32)?;
            let y = self.convert(b, DType::F32)?;
            let r = self.binary(op, x, y)?;
            return if op.is_comparison() { Ok(r) } else { self.convert(r, t) };
        }
        let x = self.materialize(&a);
        let y = b.op.clone();
        if t == DType::Bool {
            let y = self.materialize(&b);
            let r = match op {
                BinOp::And => self.op("and.pred", RegClass::Pred, vec![x.into(), y.into()]),
                BinOp::Or => self.op("or.pred", RegClass::Pred, vec![x.into(), y.into()]),
                BinOp::Xor | BinOp::Ne => self.op("xor.pred", RegClass::Pred, vec![x.into(), y.into()]),
                BinOp::Eq => {
                    let z = self.op("xor.pred", RegClass::Pred, vec![x.into(), y.into()]);
                    self.op("not.pred", RegClass::Pred, vec![z.into()])
                }
                _ => return Err(self.err(format!("`{op:?}` is not defined on bool"))),
            };
            return Ok(Val { op: r.into(), ty: t });
        }
        if op.is_comparison() {
            let (cmp, ty) = if t == DType::F32 {
                let cmp = match op {
                    BinOp::Lt => "lt",
                    BinOp::Le => "le",
                    BinOp::Gt => "gt",
                    BinOp::Ge => "ge",
                    BinOp::Eq => "eq",
                    _ => "neu",
                };
                (cmp, "f32")
            } else {
                let cmp = match op {
                    BinOp::Lt => "lt",
                    BinOp::Le => "le",
                    BinOp::Gt => "gt",
                    BinOp::Ge => "ge",
                    BinOp::Eq => "eq",
                    _ => "ne",
                };
                (cmp, int_ty(t).unwrap_or("s32"))
            };
            let r = self.op(format!("setp.{cmp}.{ty}"), RegClass::Pred, vec![x.into(), y]);
            return Ok(Val { op: r.into(), ty: DType::Bool });
        }
        let c = class_of(t);
        let r = if t == DType::F32 {
            match op {
                BinOp::Add => self.op("add.f32", c, vec![x.into(), y]),
                BinOp::Sub => self.op("sub.f32", c, vec![x.into(), y]),
                BinOp::Mul => self.op("mul.f32", c, vec![x.into(), y]),
                BinOp::Div => self.op("div.rn.f32", c, vec![x.into(), y]),
                BinOp::Min => self.op("min.f32", c, vec![x.into(), y]),
                BinOp::Max => self.op("max.f32", c, vec![x.into(), y]),
                BinOp::Rem => {
                    // fmod: a - trunc(a / b) · b.
                    let q = self.op("div.rn.f32", c, vec![x.into(), y.clone()]);
                    let qt = self.op("cvt.rzi.f32.f32", c, vec![q.into()]);
                    let nq = self.op("neg.f32", c, vec![qt.into()]);
                    self.op("fma.rn.f32", c, vec![nq.into(), y, x.into()])
                }
                _ => return Err(self.err(format!("`{op:?}` is not defined on f32"))),
            }
        } else {
            let it = int_ty(t).ok_or_else(|| self.err(format!("`{op:?}` is not defined on {t}")))?;
            let bt = bits_ty(t);
            let y = if matches!(op, BinOp::Shl | BinOp::Shr) && t == DType::I64 {
                let yr = self.materialize(&b);
                Operand::Reg(self.op("cvt.u32.u64", RegClass::B32, vec![yr.into()]))
            } else {
                y
            };
            let name = match op {
                BinOp::Add => format!("add.{it}"),
                BinOp::Sub => format!("sub.{it}"),
                BinOp::Mul => format!("mul.lo.{it}"),
                BinOp::Div => format!("div.{it}"),
                BinOp::Rem => format!("rem.{it}"),
                BinOp::Min => format!("min.{it}"),
                BinOp::Max => format!("max.{it}"),
                BinOp::And => format!("and.{bt}"),
                BinOp::Or => format!("or.{bt}"),
                BinOp::Xor => format!("xor.{bt}"),
                BinOp::Shl => format!("shl.{bt}"),
                BinOp::Shr => format!("shr.{it}"),
                _ => return Err(self.err(format!("`{op:?}` is not defined on {t}"))),
            };
            self.op(name, c, vec![x.into(), y])
        };
        Ok(Val { op: r.into(), ty: t })
    }

    // ---------------------------------------------------------------- memory

    /// Loads `n` contiguous elements (aligned to the access size) into fresh registers.
    fn load_vec(&mut self, space: Space, region: Option<Region>, addr: &Address, dt: DType, n: usize) -> Vec<Reg> {
        let size = dt.size_bytes() as usize;
        let mut out = Vec::new();
        if dt == DType::Bool {
            for e in 0..n {
                let w = self.new_reg(RegClass::B32);
                let a = Address { base: addr.base.clone(), offset: addr.offset + e as i64 };
                self.emit(Inst::Ld { space, ty: "u8", dsts: vec![w], addr: a, region });
                out.push(self.op("setp.ne.u32", RegClass::Pred, vec![w.into(), Operand::Imm(0)]));
            }
            return out;
        }
        let chunk = (16 / size).max(1);
        let mut e = 0;
        while e < n {
            let m = chunk.min(n - e);
            let a = Address { base: addr.base.clone(), offset: addr.offset + (e * size) as i64 };
            if size == 2 && m >= 2 {
                let words: Vec<Reg> = (0..m / 2).map(|_| self.new_reg(RegClass::B32)).collect();
                self.emit(Inst::Ld { space, ty: "b32", dsts: words.clone(), addr: a, region });
                for w in words {
                    let lo = self.new_reg(RegClass::B16);
                    let hi = self.new_reg(RegClass::B16);
                    self.emit(Inst::Unpack { lo, hi, src: w });
                    out.push(lo);
                    out.push(hi);
                }
            } else {
                let regs: Vec<Reg> = (0..m).map(|_| self.new_reg(class_of(dt))).collect();
                self.emit(Inst::Ld { space, ty: mem_ty(dt), dsts: regs.clone(), addr: a, region });
                out.extend(regs);
            }
            e += m;
        }
        out
    }

    /// Stores `vals` (contiguous, aligned to the access size).
    fn store_vec(&mut self, space: Space, region: Option<Region>, addr: &Address, dt: DType, vals: &[Reg]) {
        let size = dt.size_bytes() as usize;
        let n = vals.len();
        if dt == DType::Bool {
            for (e, v) in vals.iter().enumerate() {
                let w = self.op("selp.u32", RegClass::B32, vec![Operand::Imm(1), Operand::Imm(0), (*v).into()]);
                let a = Address { base: addr.base.clone(), offset: addr.offset + e as i64 };
                self.emit(Inst::St { space, ty: "u8", srcs: vec![w.into()], addr: a, region });
            }
            return;
        }
        let chunk = (16 / size).max(1);
        let mut e = 0;
        while e < n {
            let m = chunk.min(n - e);
            let a = Address { base: addr.base.clone(), offset: addr.offset + (e * size) as i64 };
            if size == 2 && m >= 2 {
                let mut words = Vec::new();
                for p in 0..m / 2 {
                    let w = self.new_reg(RegClass::B32);
                    self.emit(Inst::Pack { dst: w, lo: vals[e + 2 * p], hi: vals[e + 2 * p + 1] });
                    words.push(Operand::Reg(w));
                }
                self.emit(Inst::St { space, ty: "b32", srcs: words, addr: a, region });
            } else {
                let srcs = vals[e..e + m].iter().map(|r| Operand::Reg(*r)).collect();
                self.emit(Inst::St { space, ty: mem_ty(dt), srcs, addr: a, region });
            }
            e += m;
        }
    }

    /// Checks that `index` has one coordinate per dim of `buf`.
    fn check_rank(&self, buf: BufferId, index: &[Expr]) -> R<()> {
        let b = self.k.buffer(buf);
        if index.len() != b.rank() {
            return Err(self.err(format!(
                "`{}` has {} dimensions but is indexed with {}",
                b.name,
                b.rank(),
                index.len()
            )));
        }
        Ok(())
    }

    fn index_ops(&mut self, index: &[Expr]) -> R<Vec<Operand>> {
        index
            .iter()
            .map(|e| {
                let v = self.expr(e)?;
                Ok(self.convert(v, DType::I32)?.op)
            })
            .collect()
    }

    /// The register of fragment `buf` that the current nest iteration touches.
    fn frag_reg(&mut self, buf: BufferId, index: &[Expr]) -> R<Reg> {
        let name = &self.k.buffer(buf).name;
        let nest = self
            .nest
            .as_ref()
            .ok_or_else(|| self.err(format!("fragment `{name}` can only be indexed inside a parallel loop")))?;
        let pos = nest_positions(&nest.vars, index).ok_or_else(|| {
            self.err(format!(
                "fragment `{name}` must be indexed by the enclosing parallel loop variables, in loop order"
            ))
        })?;
        let layout = self.plan.frags.get(&buf).ok_or_else(|| self.err(format!("fragment `{name}` has no layout")))?;
        let view =
            FragLayout { root: nest.layout.root.clone(), kept: pos.iter().map(|&p| nest.layout.kept[p]).collect() };
        if !layout.agrees(&view) {
            return Err(self.err(format!(
                "layout conflict: fragment `{name}` is laid out as {} but this parallel loop reads it as {}",
                layout.describe(),
                view.describe()
            )));
        }
        let l: Vec<i64> = pos.iter().map(|&p| nest.l[p]).collect();
        let r = layout.flatten(&l);
        self.frags
            .get(&buf)
            .and_then(|v| v.get(r).copied())
            .ok_or_else(|| self.err("internal: fragment register out of range"))
    }

    /// Reads local element `idx` (every thread holds every element).
    fn local_read(&mut self, buf: BufferId, idx: &[Operand]) -> R<Val> {
        let b = self.k.buffer(buf);
        let t = b.dtype;
        let shape = b.const_shape().ok_or_else(|| self.err("local buffers need a constant shape"))?;
        let regs = self.locals.get(&buf).cloned().unwrap_or_default();
        let flat = self.rowmajor_i32(idx, &shape);
        if let Operand::Imm(i) = flat {
            let r = regs
                .get(i as usize)
                .copied()
                .ok_or_else(|| self.err(format!("index {i} out of bounds of local `{}`", b.name)))?;
            return Ok(Val { op: r.into(), ty: t });
        }
        // Unrolled select over every element.
        let acc = self.new_reg(class_of(t));
        let first = regs.first().copied().ok_or_else(|| self.err("empty local buffer"))?;
        self.mov(acc, first.into(), t);
        for (i, r) in regs.iter().enumerate().skip(1) {
            let p = self.op("setp.eq.s32", RegClass::Pred, vec![flat.clone(), Operand::Imm(i as i64)]);
            self.emit_guarded(
                Inst::Op { op: format!("mov.{}", mov_ty(t)), dst: acc, args: vec![(*r).into()] },
                Some((p, false)),
            );
        }
        Ok(Val { op: acc.into(), ty: t })
    }

    fn local_write(&mut self, buf: BufferId, idx: &[Operand], v: Val) -> R<()> {
        let b = self.k.buffer(buf);
        let t = b.dtype;
        let shape = b.const_shape().ok_or_else(|| self.err("local buffers need a constant shape"))?;
        let regs = self.locals.get(&buf).cloned().unwrap_or_default();
        let v = self.convert(v, t)?;
        let flat = self.rowmajor_i32(idx, &shape);
        if let Operand::Imm(i) = flat {
            let r = regs
                .get(i as usize)
                .copied()
                .ok_or_else(|| self.err(format!("index {i} out of bounds of local `{}`", b.name)))?;
            self.mov(r, v.op, t);
            return Ok(());
        }
        let src = self.materialize(&v);
        for (i, r) in regs.iter().enumerate() {
            let p = self.op("setp.eq.s32", RegClass::Pred, vec![flat.clone(), Operand::Imm(i as i64)]);
            self.emit_guarded(
                Inst::Op { op: format!("mov.{}", mov_ty(t)), dst: *r, args: vec![src.into()] },
                Some((p, false)),
            );
        }
        Ok(())
    }

    fn load(&mut self, buf: BufferId, index: &[Expr]) -> R<Val> {
        self.check_rank(buf, index)?;
        let b = self.k.buffer(buf);
        let t = b.dtype;
        match b.scope {
            Scope::Fragment => {
                let r = self.frag_reg(buf, index)?;
                Ok(Val { op: r.into(), ty: t })
            }
            Scope::Local => {
                let idx = self.index_ops(index)?;
                self.local_read(buf, &idx)
            }
            Scope::Shared => {
                let idx = self.index_ops(index)?;
                let addr = self.shared_addr(buf, &idx)?;
                let region = self.region_of(buf);
                let r = self.load_vec(Space::Shared, region, &addr, t, 1);
                Ok(Val { op: r[0].into(), ty: t })
            }
            Scope::Global => {
                let idx = self.index_ops(index)?;
                let p = self.in_bounds(buf, &idx, 0)?;
                let addr = self.global_addr(buf, &idx)?;
                let r = self.new_reg(class_of(t));
                let zero = self.zero(t);
                self.mov(r, zero, t);
                let ld = Inst::Ld {
                    space: Space::Global,
                    ty: mem_ty(t),
                    dsts: vec![r],
                    addr: Address { base: addr.into(), offset: 0 },
                    region: None,
                };
                self.emit_guarded(ld, p.map(|p| (p, false)));
                Ok(Val { op: r.into(), ty: t })
            }
        }
    }

    fn zero(&self, t: DType) -> Operand {
        match t {
            DType::F32 => Operand::F32(0.0),
            DType::F16 | DType::BF16 => Operand::B16(0),
            _ => Operand::Imm(0),
        }
    }

    /// The guard for a side effect on memory: thread 0 in uniform code, the
    /// first replica in a replicated parallel nest.
    fn side_effect_guard(&self) -> Option<Reg> {
        match &self.nest {
            None => Some(self.is_t0),
            Some(n) => n.primary,
        }
    }

    // ------------------------------------------------------------ statements

    fn lower_block(&mut self, body: &[TStmt]) {
        for s in body {
            let local = self.blocks.len() == 1
                && self.local_prologue.is_none()
                && matches!(&s.kind, StmtKind::Copy { src, dst, .. }
                    if self.plan.scratch.contains(&src.buf) || self.plan.scratch.contains(&dst.buf));
            let at = self.blocks[0].len();
            if local {
                self.local_prologue = Some(Vec::new());
            }
            if let Err(e) = self.stmt(s) {
                self.errors.push(e);
            }
            if local {
                let code = self.local_prologue.take().unwrap_or_default();
                self.blocks[0].splice(at..at, code);
            }
        }
    }

    fn stmt(&mut self, s: &TStmt) -> R<()> {
        self.span = s.span;
        if self.nest.is_none() {
            self.cur_op += 1;
        }
        if let Some(n) = parallel_nest(s) {
            let n = n?;
            if self.nest.is_some() {
                return Err(self.err("a parallel loop cannot be nested inside another parallel loop's body"));
            }
            return self.lower_nest(&n);
        }
        let in_nest = self.nest.is_some();
        let collective = |s: &Self, what: &str| {
            s.err(format!("`{what}` is a block-wide operation and cannot appear inside a parallel loop"))
        };
        if let (Some(st), false) = (self.ws.and_then(|w| w.store.as_ref()), in_nest) {
            if let (true, StmtKind::Copy { dst, .. }) = (std::ptr::eq(s, &self.k.body[st.index]), &s.kind) {
                return self.lower_ws_store(st, dst);
            }
        }
        match &s.kind {
            StmtKind::Let { var, value } => {
                let v = self.expr(value)?;
                let t = self.k.var(*var).dtype;
                let v = self.convert(v, t)?;
                let r = self.new_reg(class_of(t));
                self.mov(r, v.op, t);
                self.vars.insert(*var, r);
                if in_nest {
                    self.nest_bound.insert(*var);
                } else if self.k.var(*var).kind == VarKind::Let {
                    let m = self.known_multiple(value);
                    self.var_mult.insert(*var, m);
                }
                Ok(())
            }
            StmtKind::Assign { var, value } => {
                if in_nest && !self.nest_bound.contains(var) {
                    return Err(self.err(format!(
                        "`{}` is assigned inside a parallel loop but declared outside it; parallel iterations cannot update a shared scalar",
                        self.k.var(*var).name
                    )));
                }
                let v = self.expr(value)?;
                let t = self.k.var(*var).dtype;
                let v = self.convert(v, t)?;
                let r = *self.vars.get(var).ok_or_else(|| self.err("assignment to an unbound variable"))?;
                self.mov(r, v.op, t);
                Ok(())
            }
            StmtKind::Store { buf, index, value } => self.lower_store(*buf, index, value),
            StmtKind::AtomicAdd { buf, index, value } => self.lower_atomic(*buf, index, value),
            StmtKind::For { var, start, end, kind, body } => {
                debug_assert!(!matches!(kind, LoopKind::Parallel));
                if self.k.var(*var).dtype != DType::I32 {
                    return Err(self.err("loop variables must be i32"));
                }
                if let Some(ws) = self.ws {
                    if !in_nest && std::ptr::eq(s, &self.k.body[ws.loop_index]) {
                        return self.lower_ws_loop(*var, start, end, body);
                    }
                }
                if let (false, Some(pl)) = (in_nest, self.pipe.loops.get(var).cloned()) {
                    return self.lower_pipelined(*var, start, end, body, &pl);
                }
                let s0 = self.expr(start)?;
                let s0 = self.convert(s0, DType::I32)?.op;
                let e0 = self.expr(end)?;
                let e0 = self.convert(e0, DType::I32)?.op;
                // The range is evaluated once (Rust semantics): snapshot a
                // register bound so that the body may reassign its variable.
                let e0 = match e0 {
                    Operand::Reg(r) => {
                        let c = self.new_reg(RegClass::B32);
                        self.mov(c, r.into(), DType::I32);
                        Operand::Reg(c)
                    }
                    other => other,
                };
                let vr = self.new_reg(RegClass::B32);
                let exit = self.new_reg(RegClass::Pred);
                self.vars.insert(*var, vr);
                if in_nest {
                    self.nest_bound.insert(*var);
                }
                self.loop_depth += 1;
                let b = self.capture(|s| {
                    s.lower_block(body);
                    Ok(())
                });
                self.loop_depth -= 1;
                let b = b?;
                self.cur().push(Stmt::For { var: vr, start: s0, end: e0, exit, uniform: !in_nest, body: b });
                Ok(())
            }
            StmtKind::If { cond, then, otherwise } => {
                let c = self.expr(cond)?;
                let c = self.materialize(&c);
                let t = self.capture(|s| {
                    s.lower_block(then);
                    Ok(())
                })?;
                let o = self.capture(|s| {
                    s.lower_block(otherwise);
                    Ok(())
                })?;
                self.cur().push(Stmt::If { cond: c, negate: false, uniform: !in_nest, then: t, otherwise: o });
                Ok(())
            }
            StmtKind::Copy { src, dst, fill } => {
                if in_nest {
                    return Err(collective(self, "copy"));
                }
                self.lower_copy(src, dst, fill.as_ref())
            }
            StmtKind::Fill { buf, value } => {
                if in_nest {
                    return Err(collective(self, "fill"));
                }
                self.lower_fill(*buf, value)
            }
            StmtKind::Reduce { op, src, dst, dim, keep } => {
                if in_nest {
                    return Err(collective(self, "reduce"));
                }
                self.lower_reduce(*op, *src, *dst, *dim, *keep)
            }
            StmtKind::Gemm { a, b, c, trans_a, trans_b, clear, policy } => {
                if in_nest {
                    return Err(collective(self, "gemm"));
                }
                self.lower_gemm(*a, *b, *c, *trans_a, *trans_b, *clear, *policy)
            }
            StmtKind::Barrier => {
                if in_nest {
                    return Err(collective(self, "barrier"));
                }
                self.emit(Inst::BarSync);
                Ok(())
            }
        }
    }

    /// A power of two known to divide `e` (alignment proofs for vector accesses).
    fn known_multiple(&self, e: &Expr) -> i64 {
        const CAP: i64 = 1 << 20;
        match e {
            Expr::Const(Value::I32(0)) | Expr::Const(Value::I64(0)) | Expr::Const(Value::U32(0)) => CAP,
            Expr::Const(Value::I32(c)) => (1i64 << (*c as i64).trailing_zeros().min(20)).min(CAP),
            Expr::Const(Value::U32(c)) => (1i64 << (*c as i64).trailing_zeros().min(20)).min(CAP),
            Expr::Const(Value::I64(c)) => (1i64 << c.trailing_zeros().min(20)).min(CAP),
            Expr::Var(v) => self.var_mult.get(v).copied().unwrap_or(1),
            Expr::Cast { to, arg } if to.is_int() => self.known_multiple(arg),
            Expr::Binary { op: BinOp::Add | BinOp::Sub | BinOp::Min | BinOp::Max, lhs, rhs } => {
                self.known_multiple(lhs).min(self.known_multiple(rhs))
            }
            Expr::Binary { op: BinOp::Mul, lhs, rhs } => (self.known_multiple(lhs) * self.known_multiple(rhs)).min(CAP),
            Expr::Binary { op: BinOp::Shl, lhs, rhs } => match const_int(rhs) {
                Some(s) if (0..20).contains(&s) => (self.known_multiple(lhs) << s).min(CAP),
                _ => 1,
            },
            _ => 1,
        }
    }

    fn lower_store(&mut self, buf: BufferId, index: &[Expr], value: &Expr) -> R<()> {
        self.check_rank(buf, index)?;
        let b = self.k.buffer(buf);
        let t = b.dtype;
        match b.scope {
            Scope::Fragment => {
                let r = self.frag_reg(buf, index)?;
                let v = self.expr(value)?;
                let v = self.convert(v, t)?;
                self.mov(r, v.op, t);
                Ok(())
            }
            Scope::Local => {
                if self.nest.is_some() {
                    return Err(self.err(format!(
                        "local `{}` is block-uniform and cannot be written inside a parallel loop",
                        b.name
                    )));
                }
                let idx = self.index_ops(index)?;
                let v = self.expr(value)?;
                self.local_write(buf, &idx, v)
            }
            Scope::Shared => {
                let idx = self.index_ops(index)?;
                let v = self.expr(value)?;
                let v = self.convert(v, t)?;
                let vr = self.materialize(&v);
                let addr = self.shared_addr(buf, &idx)?;
                let region = self.region_of(buf);
                let g = self.side_effect_guard();
                let body = self.capture(|s| {
                    s.store_vec(Space::Shared, region, &addr, t, &[vr]);
                    Ok(())
                })?;
                self.emit_if(g, false, body, vec![]);
                Ok(())
            }
            Scope::Global => {
                let idx = self.index_ops(index)?;
                let v = self.expr(value)?;
                let v = self.convert(v, t)?;
                let vr = self.materialize(&v);
                let p = self.in_bounds(buf, &idx, 0)?;
                let g = self.side_effect_guard();
                let p = self.and_pred(p, g);
                let addr = self.global_addr(buf, &idx)?;
                let body = self.capture(|s| {
                    s.store_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, t, &[vr]);
                    Ok(())
                })?;
                self.emit_if(p, false, body, vec![]);
                Ok(())
            }
        }
    }

    fn lower_atomic(&mut self, buf: BufferId, index: &[Expr], value: &Expr) -> R<()> {
        self.check_rank(buf, index)?;
        let b = self.k.buffer(buf);
        let t = b.dtype;
        if b.scope != Scope::Global {
            return Err(
                self.err(format!("atomic_add needs a global tensor element; `{}` is not a tensor parameter", b.name))
            );
        }
        let ty = match (t, self.target) {
            (DType::F32, _) => "f32",
            (DType::I32, _) => "s32",
            (DType::U32, _) => "u32",
            (DType::I64, _) => "u64",
            (DType::F16, _) => "f16",
            (DType::BF16, Target::Sm90a) => "bf16",
            _ => {
                return Err(self.err(format!("atomic_add on {t} is not supported for {}", self.target.name())));
            }
        };
        let idx = self.index_ops(index)?;
        let v = self.expr(value)?;
        let v = self.convert(v, t)?;
        let vr = self.materialize(&v);
        let p = self.in_bounds(buf, &idx, 0)?;
        let g = self.side_effect_guard();
        let p = self.and_pred(p, g);
        let addr = self.global_addr(buf, &idx)?;
        let dst = self.new_reg(class_of(t));
        let body = self.capture(|s| {
            s.emit(Inst::AtomAdd {
                space: Space::Global,
                ty,
                dst,
                addr: Address { base: addr.into(), offset: 0 },
                src: vr.into(),
            });
            Ok(())
        })?;
        self.emit_if(p, false, body, vec![]);
        Ok(())
    }

    // ------------------------------------------------------- parallel nests

    fn lower_nest(&mut self, n: &Nest<'_>) -> R<()> {
        let layout = self
            .plan
            .nests
            .get(&n.vars[0])
            .cloned()
            .ok_or_else(|| self.err("internal: parallel loop has no layout"))?;
        if layout.shape() != n.extents {
            return Err(self.err("internal: parallel loop layout does not match its extents"));
        }
        if layout.num_regs() > MAX_REGS_PER_THREAD {
            return Err(self.err(format!(
                "this parallel loop gives each thread {} iterations to unroll (at most {MAX_REGS_PER_THREAD}); use a serial loop around a smaller parallel loop",
                layout.num_regs()
            )));
        }
        // Replicas (threads that differ only along dims the layout drops) run
        // the same iterations; only the first one may touch memory.
        let mut primary = None;
        for d in 0..layout.root.rank() {
            if layout.kept.contains(&d) || layout.root.dims[d].fields.is_empty() {
                continue;
            }
            let b = self.tbase(&layout.root.clone(), d);
            let q = self.op("setp.eq.u32", RegClass::Pred, vec![b, Operand::Imm(0)]);
            primary = self.and_pred(primary, Some(q));
        }
        let var_regs: Vec<Reg> = n.vars.iter().map(|_| self.new_reg(RegClass::B32)).collect();
        for (v, r) in n.vars.iter().zip(&var_regs) {
            self.vars.insert(*v, *r);
        }
        let saved_bound = std::mem::take(&mut self.nest_bound);
        let mut result = Ok(());
        for r in 0..layout.num_regs() {
            let l = layout.unflatten(r);
            let valid = self.valid_pred(&layout, &l);
            let body = self.capture(|s| {
                for a in 0..l.len() {
                    let c = s.coord(&layout, a, l[a]);
                    let c = s.add_i32(c, Operand::Imm(n.starts[a]));
                    s.mov(var_regs[a], c, DType::I32);
                }
                s.nest = Some(NestCtx { layout: layout.clone(), vars: n.vars.clone(), l: l.clone(), primary });
                let before = s.errors.len();
                s.lower_block(n.body);
                s.nest = None;
                // Report each problem once, not once per register.
                if s.errors.len() > before {
                    return Err(s.errors.remove(before));
                }
                Ok(())
            });
            match body {
                Ok(b) => self.emit_if(valid, false, b, vec![]),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.nest = None;
        self.nest_bound = saved_bound;
        result
    }

    // ---------------------------------------------------------------- copies

    fn side(&mut self, t: &TileRef) -> R<Side> {
        let b = self.k.buffer(t.buf);
        Ok(match b.scope {
            Scope::Global => {
                let origin = self.index_ops(&t.origin)?;
                Side::Global { buf: t.buf, origin, lead: 0 }
            }
            Scope::Shared => Side::Shared(t.buf),
            Scope::Fragment => Side::Frag(t.buf),
            Scope::Local => Side::Local(t.buf),
        })
    }

    fn lower_copy(&mut self, src: &TileRef, dst: &TileRef, fill: Option<&Expr>) -> R<()> {
        if self.in_pipeline_issue && self.tma_issue(src, dst)? {
            return Ok(());
        }
        if self.in_pipeline_issue {
            if let Some(rc) = self.reduced.get(&dst.buf).cloned() {
                // Strength-reduced (`lower/reduced_copy.rs`): the origin is
                // not evaluated, the copy's state says where the next tile is.
                return self.issue_reduced(&rc, dst.buf);
            }
        }
        let (sb, db) = (self.k.buffer(src.buf), self.k.buffer(dst.buf));
        let (sdt, ddt) = (sb.dtype, db.dtype);
        if sb.scope == Scope::Global && db.scope == Scope::Global {
            return Err(self.err(format!(
                "copy from tensor `{}` to tensor `{}`: a copy needs a shared, fragment or local side to give the tile's extent",
                sb.name, db.name
            )));
        }
        let tile_buf = if sb.scope == Scope::Global { db } else { sb };
        let shape = tile_buf.const_shape().ok_or_else(|| self.err("the tile side of a copy needs a constant shape"))?;
        if sb.scope != Scope::Global && db.scope != Scope::Global && sb.const_shape() != db.const_shape() {
            return Err(self.err(format!("copy from `{}` to `{}`: shapes differ", sb.name, db.name)));
        }
        let fill_val = match fill {
            Some(e) => {
                let v = self.expr(e)?;
                let v = self.convert(v, ddt)?;
                Val { op: Operand::Reg(self.materialize(&v)), ty: ddt }
            }
            None => Val { op: self.zero(ddt), ty: ddt },
        };
        let mut s_side = self.side(src)?;
        let mut d_side = self.side(dst)?;
        let mut global_origin_expr: Option<(&Expr, BufferId)> = None;
        for (side, t) in [(&mut s_side, src), (&mut d_side, dst)] {
            if let Side::Global { buf, origin, lead } = side {
                let rank = self.k.buffer(*buf).rank();
                if origin.len() != rank {
                    return Err(self.err(format!(
                        "tile of `{}` needs {} origin coordinates, found {}",
                        self.k.buffer(*buf).name,
                        rank,
                        origin.len()
                    )));
                }
                if shape.len() > rank || shape.is_empty() {
                    return Err(self.err(format!(
                        "a {}-D tile does not fit tensor `{}` of rank {rank}",
                        shape.len(),
                        self.k.buffer(*buf).name
                    )));
                }
                *lead = rank - shape.len();
                global_origin_expr = t.origin.last().map(|e| (e, *buf));
            }
        }
        if matches!(s_side, Side::Local(_)) || matches!(d_side, Side::Local(_)) {
            return self.copy_local(&s_side, &d_side, &shape, sdt, ddt, &fill_val);
        }
        if let (Side::Frag(fb), Side::Global { buf, origin, lead: 0 }) = (&s_side, &d_side) {
            // Accumulator epilogues: per-thread base address, immediate column offsets.
            if self.store_fragment_2d(*fb, *buf, origin, global_origin_expr.map(|e| e.0))? {
                return Ok(());
            }
        }
        let layout = match (&s_side, &d_side) {
            (Side::Frag(a), Side::Frag(b)) => {
                let (la, lb) = (self.plan.frags.get(a), self.plan.frags.get(b));
                match (la, lb) {
                    (Some(la), Some(lb)) if la.agrees(lb) => la.clone(),
                    _ => {
                        return Err(self.err(format!(
                            "copy from fragment `{}` to fragment `{}`: their layouts differ",
                            sb.name, db.name
                        )))
                    }
                }
            }
            (Side::Frag(a), _) | (_, Side::Frag(a)) => {
                self.plan.frags.get(a).cloned().ok_or_else(|| self.err("internal: fragment has no layout"))?
            }
            _ => {
                let other = if sb.scope == Scope::Global { sdt } else { ddt };
                FragLayout::full(RootLayout::blocked(&shape, self.k.threads, (16 / other.size_bytes() as i64).max(1)))
            }
        };
        if layout.shape() != shape {
            return Err(self.err("internal: layout shape differs from the copy's tile"));
        }
        let v = layout.vec_width();
        let use_async = self.async_copy_ok(&s_side, &d_side, sdt, ddt, fill);
        self.copy_dispatch(&layout, &s_side, &d_side, sdt, ddt, &fill_val, v, global_origin_expr, use_async)?;
        if use_async && !self.in_pipeline_issue {
            // Outside pipelined loops the copy completes here; the barrier
            // pass puts a `bar.sync` before the first read by other threads.
            self.emit(Inst::CpAsyncCommit);
            self.emit(Inst::CpAsyncWait { pending: 0 });
        }
        Ok(())
    }

    /// Emits the copy's element groups: vectorized where alignment is proven
    /// (or tested at run time), as cp.async when `use_async`.
    #[allow(clippy::too_many_arguments)]
    fn copy_dispatch(
        &mut self,
        layout: &FragLayout,
        s_side: &Side,
        d_side: &Side,
        sdt: DType,
        ddt: DType,
        fill_val: &Val,
        v: i64,
        global_origin_expr: Option<(&Expr, BufferId)>,
        use_async: bool,
    ) -> R<()> {
        let layout = layout.clone();
        let (s_side, d_side, fill_val) = (s_side.clone(), d_side.clone(), fill_val.clone());
        match global_origin_expr {
            Some((origin_last, gbuf)) if v > 1 => {
                let aligned_origin = self.known_multiple(origin_last) % v == 0;
                let last_extent = *self.k.buffer(gbuf).shape.last().unwrap_or(&Extent::Const(1));
                match (aligned_origin, last_extent) {
                    (true, Extent::Const(c)) if c % v == 0 => {
                        self.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, true, use_async)
                    }
                    (true, Extent::Dyn(dv)) if self.var_mult.get(&dv).copied().unwrap_or(1) % v == 0 => {
                        // Known to be a multiple of v (a versioned pipelined loop).
                        self.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, true, use_async)
                    }
                    (true, Extent::Dyn(dv)) => {
                        // Uniform run-time test: vector path when the row length is a multiple of v.
                        let dr = *self.vars.get(&dv).ok_or_else(|| self.err("internal: dim not bound"))?;
                        let m = self.op("and.b32", RegClass::B32, vec![dr.into(), Operand::Imm(v - 1)]);
                        let p = self.op("setp.eq.u32", RegClass::Pred, vec![m.into(), Operand::Imm(0)]);
                        let (ss, ds, fv) = (s_side.clone(), d_side.clone(), fill_val.clone());
                        let then =
                            self.capture(|s| s.copy_groups_any(&layout, &ss, &ds, sdt, ddt, &fv, true, use_async))?;
                        let other = self.capture(|s| {
                            s.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, false, use_async)
                        })?;
                        self.emit_if(Some(p), true, then, other);
                        Ok(())
                    }
                    _ => self.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, false, use_async),
                }
            }
            _ => self.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, v > 1, use_async),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_groups(
        &mut self,
        lay: &FragLayout,
        src: &Side,
        dst: &Side,
        sdt: DType,
        ddt: DType,
        fill: &Val,
        vectorize: bool,
    ) -> R<()> {
        let v = lay.vec_width() as usize;
        // A replicated layout (a reduction's result) writes memory from its
        // first replica only.
        let mut primary = None;
        if matches!(dst, Side::Global { .. } | Side::Shared(_)) {
            for d in 0..lay.root.rank() {
                if lay.kept.contains(&d) || lay.root.dims[d].fields.is_empty() {
                    continue;
                }
                let b = self.tbase(&lay.root.clone(), d);
                let q = self.op("setp.eq.u32", RegClass::Pred, vec![b, Operand::Imm(0)]);
                primary = self.and_pred(primary, Some(q));
            }
        }
        for r0 in (0..lay.num_regs()).step_by(v) {
            let l = lay.unflatten(r0);
            let coords: Vec<Operand> = (0..lay.rank()).map(|a| self.coord(lay, a, l[a])).collect();
            let fvalid = self.valid_pred(lay, &l);
            let vals = self.read_side(src, &coords, r0, v, fvalid, sdt, ddt, fill, vectorize)?;
            let wvalid = self.and_pred(fvalid, primary);
            self.write_side(dst, &coords, r0, wvalid, ddt, &vals, vectorize)?;
        }
        Ok(())
    }

    fn global_coords(&mut self, origin: &[Operand], lead: usize, coords: &[Operand]) -> Vec<Operand> {
        let mut g: Vec<Operand> = origin[..lead].to_vec();
        for (a, c) in coords.iter().enumerate() {
            let x = self.add_i32(origin[lead + a].clone(), c.clone());
            g.push(x);
        }
        g
    }

    /// Reads `v` contiguous elements at tile `coords` (starting at register
    /// `r0` for fragments) and converts them to `ddt`.
    #[allow(clippy::too_many_arguments)]
    fn read_side(
        &mut self,
        side: &Side,
        coords: &[Operand],
        r0: usize,
        v: usize,
        fvalid: Option<Reg>,
        sdt: DType,
        ddt: DType,
        fill: &Val,
        vectorize: bool,
    ) -> R<Vec<Reg>> {
        match side {
            Side::Frag(b) => {
                let regs = self.frags.get(b).cloned().unwrap_or_default();
                let mut out = Vec::new();
                for e in 0..v {
                    let r = *regs.get(r0 + e).ok_or_else(|| self.err("internal: fragment register out of range"))?;
                    let c = self.convert(Val { op: r.into(), ty: sdt }, ddt)?;
                    out.push(self.materialize(&c));
                }
                Ok(out)
            }
            Side::Shared(b) => {
                let addr = self.shared_addr(*b, coords)?;
                let region = self.region_of(*b);
                let mut raw = Vec::new();
                let body = self.capture(|s| {
                    raw = s.load_vec(Space::Shared, region, &addr, sdt, v);
                    Ok(())
                })?;
                self.emit_if(fvalid, false, body, vec![]);
                let mut out = Vec::new();
                for r in raw {
                    let c = self.convert(Val { op: r.into(), ty: sdt }, ddt)?;
                    out.push(self.materialize(&c));
                }
                Ok(out)
            }
            Side::Global { buf, origin, lead } => {
                let g = self.global_coords(origin, *lead, coords);
                let addr = self.global_addr(*buf, &g)?;
                let outs: Vec<Reg> = (0..v).map(|_| self.new_reg(class_of(ddt))).collect();
                let size = sdt.size_bytes() as i64;
                let scalar = |s: &mut Self| -> R<()> {
                    for (e, out) in outs.iter().enumerate() {
                        s.mov(*out, fill.op.clone(), ddt);
                        let mut ge = g.clone();
                        let last = ge.len() - 1;
                        ge[last] = s.add_i32(ge[last].clone(), Operand::Imm(e as i64));
                        let p = s.in_bounds(*buf, &ge, 0)?;
                        let p = s.and_pred(p, fvalid);
                        let (out, a) = (*out, Address { base: addr.into(), offset: e as i64 * size });
                        let body = s.capture(|s| {
                            let x = s.load_vec(Space::Global, None, &a, sdt, 1);
                            let c = s.convert(Val { op: x[0].into(), ty: sdt }, ddt)?;
                            s.mov(out, c.op, ddt);
                            Ok(())
                        })?;
                        s.emit_if(p, false, body, vec![]);
                    }
                    Ok(())
                };
                if vectorize && v > 1 {
                    let p = self.in_bounds(*buf, &g, v as i64 - 1)?;
                    let p = self.and_pred(p, fvalid);
                    let then = self.capture(|s| {
                        let xs = s.load_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, sdt, v);
                        for (x, out) in xs.iter().zip(&outs) {
                            let c = s.convert(Val { op: (*x).into(), ty: sdt }, ddt)?;
                            s.mov(*out, c.op, ddt);
                        }
                        Ok(())
                    })?;
                    match p {
                        None => self.cur().extend(then),
                        Some(p) => {
                            let other = self.capture(scalar)?;
                            self.cur().push(Stmt::If {
                                cond: p,
                                negate: false,
                                uniform: false,
                                then,
                                otherwise: other,
                            });
                        }
                    }
                } else {
                    scalar(self)?;
                }
                Ok(outs)
            }
            Side::Local(_) => Err(self.err("internal: local copy on the distributed path")),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write_side(
        &mut self,
        side: &Side,
        coords: &[Operand],
        r0: usize,
        fvalid: Option<Reg>,
        ddt: DType,
        vals: &[Reg],
        vectorize: bool,
    ) -> R<()> {
        match side {
            Side::Frag(b) => {
                let regs = self.frags.get(b).cloned().unwrap_or_default();
                for (e, x) in vals.iter().enumerate() {
                    let r = *regs.get(r0 + e).ok_or_else(|| self.err("internal: fragment register out of range"))?;
                    self.mov(r, (*x).into(), ddt);
                }
                Ok(())
            }
            Side::Shared(b) => {
                let addr = self.shared_addr(*b, coords)?;
                let region = self.region_of(*b);
                let body = self.capture(|s| {
                    s.store_vec(Space::Shared, region, &addr, ddt, vals);
                    Ok(())
                })?;
                self.emit_if(fvalid, false, body, vec![]);
                Ok(())
            }
            Side::Global { buf, origin, lead } => {
                let g = self.global_coords(origin, *lead, coords);
                let addr = self.global_addr(*buf, &g)?;
                let size = ddt.size_bytes() as i64;
                let v = vals.len();
                let scalar = |s: &mut Self| -> R<()> {
                    for (e, x) in vals.iter().enumerate() {
                        let mut ge = g.clone();
                        let last = ge.len() - 1;
                        ge[last] = s.add_i32(ge[last].clone(), Operand::Imm(e as i64));
                        let p = s.in_bounds(*buf, &ge, 0)?;
                        let p = s.and_pred(p, fvalid);
                        let a = Address { base: addr.into(), offset: e as i64 * size };
                        let body = s.capture(|s| {
                            s.store_vec(Space::Global, None, &a, ddt, &[*x]);
                            Ok(())
                        })?;
                        s.emit_if(p, false, body, vec![]);
                    }
                    Ok(())
                };
                if vectorize && v > 1 {
                    let p = self.in_bounds(*buf, &g, v as i64 - 1)?;
                    let p = self.and_pred(p, fvalid);
                    let then = self.capture(|s| {
                        s.store_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, ddt, vals);
                        Ok(())
                    })?;
                    match p {
                        None => self.cur().extend(then),
                        Some(p) => {
                            let other = self.capture(scalar)?;
                            self.cur().push(Stmt::If {
                                cond: p,
                                negate: false,
                                uniform: false,
                                then,
                                otherwise: other,
                            });
                        }
                    }
                    Ok(())
                } else {
                    scalar(self)
                }
            }
            Side::Local(_) => Err(self.err("internal: local copy on the distributed path")),
        }
    }

    /// Copies where one side is a local buffer (block-uniform registers).
    #[allow(clippy::too_many_arguments)]
    fn copy_local(&mut self, src: &Side, dst: &Side, shape: &[i64], sdt: DType, ddt: DType, fill: &Val) -> R<()> {
        let n: i64 = shape.iter().product();
        let unflat = |mut f: i64| -> Vec<Operand> {
            let mut c = vec![Operand::Imm(0); shape.len()];
            for d in (0..shape.len()).rev() {
                c[d] = Operand::Imm(f % shape[d]);
                f /= shape[d];
            }
            c
        };
        match (src, dst) {
            (Side::Frag(_), _) | (_, Side::Frag(_)) if matches!(src, Side::Frag(_)) => Err(self.err(
                "copy from a fragment to a local buffer is not supported (a fragment is spread over threads; copy it through shared memory)",
            )),
            (_, Side::Local(db)) => {
                // Every thread reads every element.
                for f in 0..n {
                    let c = unflat(f);
                    let x = self.read_elem(src, &c, sdt, ddt, fill)?;
                    self.local_write(*db, &c, x)?;
                }
                Ok(())
            }
            (Side::Local(sb), Side::Frag(fb)) => {
                let lay = self.plan.frags.get(fb).cloned().ok_or_else(|| self.err("internal: fragment has no layout"))?;
                let regs = self.frags.get(fb).cloned().unwrap_or_default();
                for (r, reg) in regs.iter().enumerate() {
                    let l = lay.unflatten(r);
                    let coords: Vec<Operand> = (0..lay.rank()).map(|a| self.coord(&lay, a, l[a])).collect();
                    let x = self.local_read(*sb, &coords)?;
                    let x = self.convert(x, ddt)?;
                    self.mov(*reg, x.op, ddt);
                }
                Ok(())
            }
            (Side::Local(sb), _) => {
                // Side effects happen once: thread 0 writes every element.
                let t0 = self.is_t0;
                let body = self.capture(|s| {
                    for f in 0..n {
                        let c = unflat(f);
                        let x = s.local_read(*sb, &c)?;
                        let x = s.convert(x, ddt)?;
                        let xr = s.materialize(&x);
                        s.write_elem(dst, &c, ddt, xr)?;
                    }
                    Ok(())
                })?;
                self.emit_if(Some(t0), false, body, vec![]);
                Ok(())
            }
            _ => Err(self.err("internal: copy_local without a local side")),
        }
    }

    /// Reads one element at constant tile coordinates (uniform), converted to `ddt`.
    fn read_elem(&mut self, side: &Side, c: &[Operand], sdt: DType, ddt: DType, fill: &Val) -> R<Val> {
        let x = match side {
            Side::Local(b) => self.local_read(*b, c)?,
            Side::Shared(b) => {
                let addr = self.shared_addr(*b, c)?;
                let region = self.region_of(*b);
                let r = self.load_vec(Space::Shared, region, &addr, sdt, 1);
                Val { op: r[0].into(), ty: sdt }
            }
            Side::Global { buf, origin, lead } => {
                let g = self.global_coords(origin, *lead, c);
                let p = self.in_bounds(*buf, &g, 0)?;
                let addr = self.global_addr(*buf, &g)?;
                let out = self.new_reg(class_of(ddt));
                self.mov(out, fill.op.clone(), ddt);
                let body = self.capture(|s| {
                    let x = s.load_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, sdt, 1);
                    let y = s.convert(Val { op: x[0].into(), ty: sdt }, ddt)?;
                    s.mov(out, y.op, ddt);
                    Ok(())
                })?;
                self.emit_if(p, false, body, vec![]);
                return Ok(Val { op: out.into(), ty: ddt });
            }
            Side::Frag(_) => return Err(self.err("internal: element read of a fragment outside a parallel loop")),
        };
        self.convert(x, ddt)
    }

    /// Writes one element at tile coordinates (caller guards the thread).
    fn write_elem(&mut self, side: &Side, c: &[Operand], ddt: DType, x: Reg) -> R<()> {
        match side {
            Side::Shared(b) => {
                let addr = self.shared_addr(*b, c)?;
                let region = self.region_of(*b);
                self.store_vec(Space::Shared, region, &addr, ddt, &[x]);
                Ok(())
            }
            Side::Global { buf, origin, lead } => {
                let g = self.global_coords(origin, *lead, c);
                let p = self.in_bounds(*buf, &g, 0)?;
                let addr = self.global_addr(*buf, &g)?;
                let body = self.capture(|s| {
                    s.store_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, ddt, &[x]);
                    Ok(())
                })?;
                self.emit_if(p, false, body, vec![]);
                Ok(())
            }
            _ => Err(self.err("internal: unsupported element write")),
        }
    }

    // ------------------------------------------------------------------ fill

    fn lower_fill(&mut self, buf: BufferId, value: &Expr) -> R<()> {
        let b = self.k.buffer(buf);
        let t = b.dtype;
        let v = self.expr(value)?;
        let v = self.convert(v, t)?;
        match b.scope {
            Scope::Fragment => {
                for r in self.frags.get(&buf).cloned().unwrap_or_default() {
                    self.mov(r, v.op.clone(), t);
                }
                Ok(())
            }
            Scope::Local => {
                for r in self.locals.get(&buf).cloned().unwrap_or_default() {
                    self.mov(r, v.op.clone(), t);
                }
                Ok(())
            }
            Scope::Shared => {
                let shape = b.const_shape().ok_or_else(|| self.err("shared buffers need a constant shape"))?;
                let lay =
                    FragLayout::full(RootLayout::blocked(&shape, self.k.threads, (16 / t.size_bytes() as i64).max(1)));
                let x = self.materialize(&v);
                let vw = lay.vec_width() as usize;
                let region = self.region_of(buf);
                for r0 in (0..lay.num_regs()).step_by(vw) {
                    let l = lay.unflatten(r0);
                    let coords: Vec<Operand> = (0..lay.rank()).map(|a| self.coord(&lay, a, l[a])).collect();
                    let valid = self.valid_pred(&lay, &l);
                    let addr = self.shared_addr(buf, &coords)?;
                    let body = self.capture(|s| {
                        s.store_vec(Space::Shared, region, &addr, t, &vec![x; vw]);
                        Ok(())
                    })?;
                    self.emit_if(valid, false, body, vec![]);
                }
                Ok(())
            }
            Scope::Global => {
                Err(self.err(format!("fill of tensor `{}`: fill needs a shared, fragment or local buffer", b.name)))
            }
        }
    }

    // ---------------------------------------------------------------- reduce

    fn lower_reduce(&mut self, op: ReduceOp, src: BufferId, dst: BufferId, dim: usize, keep: bool) -> R<()> {
        let (sb, db) = (self.k.buffer(src), self.k.buffer(dst));
        if sb.scope != Scope::Fragment || db.scope != Scope::Fragment {
            return Err(self.err(format!("reduce from `{}` into `{}`: both must be fragments", sb.name, db.name)));
        }
        let (sdt, ddt) = (sb.dtype, db.dtype);
        let acc_t = match sdt {
            DType::F16 | DType::BF16 | DType::F32 => DType::F32,
            DType::I32 | DType::U32 => sdt,
            _ => return Err(self.err(format!("reduce over {sdt} is not supported (f16, bf16, f32, i32, u32 are)"))),
        };
        let ls = self.plan.frags.get(&src).cloned().ok_or_else(|| self.err("internal: fragment has no layout"))?;
        let ld = self.plan.frags.get(&dst).cloned().ok_or_else(|| self.err("internal: fragment has no layout"))?;
        if dim >= ls.rank() {
            return Err(self.err(format!("reduce dim {dim} is out of range for `{}`", sb.name)));
        }
        if !ld.agrees(&ls.reduced(dim)) {
            return Err(self.err(format!(
                "layout conflict: `{}` is laid out as {} but the reduction of `{}` along dim {dim} produces {}",
                db.name,
                ld.describe(),
                sb.name,
                ls.reduced(dim).describe()
            )));
        }
        let (ident, ty) = match (op, acc_t) {
            (ReduceOp::Sum, DType::F32) => (Operand::F32(0.0), "f32"),
            (ReduceOp::Max, DType::F32) => (Operand::F32(f32::NEG_INFINITY), "f32"),
            (ReduceOp::Min, DType::F32) => (Operand::F32(f32::INFINITY), "f32"),
            (ReduceOp::Sum, DType::I32) => (Operand::Imm(0), "s32"),
            (ReduceOp::Max, DType::I32) => (Operand::Imm(i32::MIN as i64), "s32"),
            (ReduceOp::Min, DType::I32) => (Operand::Imm(i32::MAX as i64), "s32"),
            (ReduceOp::Sum, _) => (Operand::Imm(0), "u32"),
            (ReduceOp::Max, _) => (Operand::Imm(0), "u32"),
            (ReduceOp::Min, _) => (Operand::Imm(u32::MAX as i64), "u32"),
        };
        let opname = match op {
            ReduceOp::Sum => format!("add.{ty}"),
            ReduceOp::Max => format!("max.{ty}"),
            ReduceOp::Min => format!("min.{ty}"),
        };
        let c = class_of(acc_t);
        let root = ls.root.clone();
        let rk = ls.kept[dim];
        let src_regs = self.frags.get(&src).cloned().unwrap_or_default();
        let dst_regs = self.frags.get(&dst).cloned().unwrap_or_default();
        let base_k = self.tbase(&root, rk);
        // 1. Per-thread partials over the registers along `dim`.
        let mut partials = Vec::new();
        for rd in 0..ld.num_regs() {
            let ldv = ld.unflatten(rd);
            let acc = self.new_reg(c);
            self.mov(acc, ident.clone(), acc_t);
            for lk in 0..root.regs_along(rk) {
                let mut l = ldv.clone();
                l.insert(dim, lk);
                let rs = ls.flatten(&l);
                let x = *src_regs.get(rs).ok_or_else(|| self.err("internal: fragment register out of range"))?;
                let x = self.convert(Val { op: x.into(), ty: sdt }, acc_t)?;
                let mut x = self.materialize(&x);
                if root.dim_padded(rk) {
                    let bound = root.shape[rk] - root.reg_offset(rk, lk);
                    if bound <= 0 {
                        continue;
                    }
                    if bound <= root.dims[rk].max_thread_part() {
                        let b = self.materialize(&Val { op: base_k.clone(), ty: DType::I32 });
                        let p = self.op("setp.lt.s32", RegClass::Pred, vec![b.into(), Operand::Imm(bound)]);
                        x = self.op(format!("selp.{}", mov_ty(acc_t)), c, vec![x.into(), ident.clone(), p.into()]);
                    }
                }
                self.op_into(opname.clone(), acc, vec![acc.into(), x.into()]);
            }
            partials.push(acc);
        }
        // 2. Butterfly within a warp over the thread bits of `dim`.
        let mask = root.dims[rk].thread_mask();
        for bit in 0..5 {
            if mask & (1 << bit) == 0 {
                continue;
            }
            for &p in &partials {
                let y = self.new_reg(c);
                self.emit(Inst::ShflBfly { dst: y, src: p, lane_mask: 1 << bit });
                self.op_into(opname.clone(), p, vec![p.into(), y.into()]);
            }
        }
        // 3. Across warps through shared memory: the threads with zero lane
        // bits of `dim` write their partial to slot (row key, warp key);
        // every thread then combines the `h` slots of its row key.
        let warp_mask = mask & !31;
        let h = 1i64 << warp_mask.count_ones();
        if h > 1 {
            let active = root.active_threads();
            let rows = active / root.dims[rk].threads_along();
            let nd = partials.len() as i64;
            let off = self.alloc_smem(nd * rows * h * 4);
            let region = Region { id: self.next_region, op: self.cur_op };
            self.next_region += 1;
            self.cur_op += 1;
            let read_region = Region { id: region.id, op: self.cur_op };
            let tid = self.tid;
            let all_bits = (active as u64).saturating_sub(1);
            let rowkey = self.extract_bits(tid, all_bits & !mask);
            let hk = self.extract_bits(tid, warp_mask);
            let lane_bits = self.op("and.b32", RegClass::B32, vec![tid.into(), Operand::Imm((mask & 31) as i64)]);
            let writer = self.op("setp.eq.u32", RegClass::Pred, vec![lane_bits.into(), Operand::Imm(0)]);
            let live = if active < self.k.threads as i64 {
                Some(self.op("setp.lt.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(active)]))
            } else {
                None
            };
            let writer = self.and_pred(Some(writer), live);
            let sm = self.smem;
            let rowkey = Operand::Reg(self.materialize(&Val { op: rowkey, ty: DType::I32 }));
            let slot = self.op("mad.lo.s32", RegClass::B32, vec![rowkey.clone(), Operand::Imm(h), hk]);
            let waddr = self.op("mad.lo.s32", RegClass::B32, vec![slot.into(), Operand::Imm(4), sm.into()]);
            let raddr = self.op("mad.lo.s32", RegClass::B32, vec![rowkey, Operand::Imm(h * 4), sm.into()]);
            let parts = partials.clone();
            let body = self.capture(|s| {
                for (rd, p) in parts.iter().enumerate() {
                    let a = Address { base: waddr.into(), offset: off + rd as i64 * rows * h * 4 };
                    s.emit(Inst::St {
                        space: Space::Shared,
                        ty: ty_b32(ty),
                        srcs: vec![(*p).into()],
                        addr: a,
                        region: Some(region),
                    });
                }
                Ok(())
            })?;
            self.emit_if(writer, false, body, vec![]);
            let body = self.capture(|s| {
                for (rd, p) in parts.iter().enumerate() {
                    s.mov(*p, ident.clone(), acc_t);
                    for j in 0..h {
                        let y = s.new_reg(c);
                        let a = Address { base: raddr.into(), offset: off + (rd as i64 * rows * h + j) * 4 };
                        s.emit(Inst::Ld {
                            space: Space::Shared,
                            ty: ty_b32(ty),
                            dsts: vec![y],
                            addr: a,
                            region: Some(read_region),
                        });
                        s.op_into(opname.clone(), *p, vec![(*p).into(), y.into()]);
                    }
                }
                Ok(())
            })?;
            self.emit_if(live, false, body, vec![]);
        }
        // 4. Result (combined with the destination's values under `keep`).
        for (rd, p) in partials.iter().enumerate() {
            let d = *dst_regs.get(rd).ok_or_else(|| self.err("internal: fragment register out of range"))?;
            let mut x = *p;
            if keep {
                let old = self.convert(Val { op: d.into(), ty: ddt }, acc_t)?;
                let old = self.materialize(&old);
                x = self.op(opname.clone(), c, vec![old.into(), x.into()]);
            }
            let y = self.convert(Val { op: x.into(), ty: acc_t }, ddt)?;
            self.mov(d, y.op, ddt);
        }
        Ok(())
    }
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

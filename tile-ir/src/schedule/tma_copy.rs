//! The TMA-copy schedule (sm_90a, [`crate::CompileOptions::tma_copies`]):
//! the cp.async pipeline ([`super::cp_async_pipeline`]) whose pipelined
//! copies that `Lx::tma_copy_of` accepts are issued by thread 0 as
//! `cp.async.bulk.tensor` boxes completing on the stage's mbarrier, instead
//! of every thread's cp.async chunks (the `StageHooks` of `TmaCopies`).
//!
//! Expects the software-pipelined loop schedule of `async_copy.rs` (every
//! stage refill after the barrier that ends the reads of the stage it
//! overwrites) and shared layouts that TMA writes as they are: `Swizzle<b,4,3>`
//! rows of exactly 32/64/128 bytes, 64-column panels of 128-byte rows, or
//! dense unswizzled rows of a multiple of 16 bytes (at most 256 elements).
//! A copy TMA does is a 2-D window of a tensor of rank 2 to 5 spanning one
//! row dim and the innermost dim, any others squeezed: its box has extent 1
//! on the squeezed dims, which TMA lays out in shared memory exactly as the
//! 2-D box of the spanned dims (the swizzle is a function of the shared
//! address alone), and coordinates out of range on any dim, a squeezed one
//! included, read zeros.
//!
//! Guarantees: per pipelined loop and wait batch
//! ([`crate::passes::pipeline::wait_batches`]: attention's K and V are two,
//! a GEMM's A and B one) with TMA copies, one `full` mbarrier per stage (1
//! arrival), initialized at kernel entry; issuing a batch of a stage is
//! thread 0's `mbarrier.arrive.expect_tx` of the bytes of all the batch's
//! boxes, then its TMA boxes (out-of-range elements zero-filled, as the
//! copy's zero fill says; an origin that reads memory, a page index, is
//! evaluated by thread 0 alone); consuming stage `s` of a batch is every
//! thread's wait on its `full[s]` with the parity kept in a bit mask per
//! batch (bit `s` flips at each wait), right after the loop's cp.async wait
//! (a later batch of TMA copies alone has no cp.async wait and no barrier). Every issued stage is waited for exactly
//! once (iterations `a..b` are each issued and consumed once), so the parities
//! stay right when an outer loop runs the pipelined loop again. The stage
//! buffers are 1024-byte aligned. The kernel takes one tensor map per TMA
//! copy ([`crate::abi::TensorMapUse`]), so the variant needs TMA-addressable
//! tensors.

use super::cp_async_pipeline::{CpAsyncStages, StageHooks};
use super::not_applicable::NotApplicable;
use crate::abi::TensorMapUse;
use crate::compiled::{CompileOptions, Compiled};
use crate::hopper::Swizzle;
use crate::ir::{BufferId, CacheHint, DType, Expr, Kernel, ParamKind, Scope, Stmt as TStmt, StmtKind, TileRef, VarId};
use crate::layout::SharedLayout;
use crate::passes::layout_infer::const_int;
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::{PipelinePlan, PipelinedLoop};
use crate::schedule::warp_specialized_gemm::has_load;
use crate::target::Feature;
use crate::thread_ir::{Address, Inst, Operand, Reg, RegClass, Stmt};
use crate::{CompileError, Target};
use std::cell::RefCell;
use std::collections::HashMap;

/// The schedule's name ([`Compiled::schedule`]).
pub const NAME: &str = "tma_copy";

/// Whether the TMA-copy schedule takes `kernel` on `target`: sm_90a, a loop
/// the cp.async pipeline takes, and a pipelined copy TMA may do as far as
/// the kernel alone tells (a 2-D global tile of f16, bf16, f32, i32 or u32
/// into a shared buffer of its type at origin 0, zero fill, of a tensor of
/// rank 2 to 5 whose other dims are squeezed and whose innermost dim is the
/// tile's second); whether its shared layout suits TMA is decided while
/// lowering ([`compile`]).
pub fn plan(kernel: &Kernel, target: Target) -> Result<PipelinePlan, NotApplicable> {
    if !target.has(Feature::Tma) {
        return Err(NotApplicable::new(format!("TMA needs sm_90a, not {}", target.name())));
    }
    let pipe = super::cp_async_pipeline::plan(kernel)?;
    let candidate = pipe.loops.iter().any(|(var, pl)| {
        let Some(body) = loop_body(&kernel.body, *var) else { return false };
        pl.copies.iter().any(|&i| match &body[i].kind {
            StmtKind::Copy { src, dst, fill, .. } => tma_candidate(kernel, src, dst, fill.as_ref()),
            _ => false,
        })
    });
    if !candidate {
        return Err(NotApplicable::new(
            "no pipelined copy is a 2-D global tile of f16, bf16, f32, i32 or u32 (of a tensor of rank 2 to 5, the other dims squeezed, spanning the innermost dim) into a shared buffer of its type at origin 0 with a zero fill",
        ));
    }
    Ok(pipe)
}

/// The TMA-copy variant of `kernel`: the general lowering with TMA stage
/// copies. Errors when none of the pipelined copies became TMA boxes.
pub fn compile(kernel: &Kernel, target: Target, options: CompileOptions) -> Result<Compiled, Vec<CompileError>> {
    let compiled = compile_where_possible(kernel, target, options)?;
    if compiled.tensor_maps.is_empty() {
        return Err(vec![CompileError::new(
            crate::ir::SpanId::NONE,
            format!("kernel `{}`: none of its pipelined copies has a shared layout TMA writes", kernel.name),
        )]);
    }
    Ok(compiled)
}

/// The general lowering with the pipelined copies TMA can do as TMA boxes
/// (on sm_90a; elsewhere, or when there are none, the general variant):
/// [`crate::compile_with`] under [`CompileOptions::tma_copies`]. Named
/// `"tma_copy"` when it took tensor maps (nothing else in the general
/// lowering does).
pub fn compile_where_possible(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
) -> Result<Compiled, Vec<CompileError>> {
    let stages = || -> Box<dyn StageHooks> {
        if target.has(Feature::Tma) {
            Box::new(TmaCopies::default())
        } else {
            Box::new(CpAsyncStages)
        }
    };
    let mut compiled = super::general::compile_with_stages(kernel, target, options, &stages)?;
    if !compiled.tensor_maps.is_empty() {
        compiled.schedule = NAME;
    }
    Ok(compiled)
}

/// The tensor dims `(row, column)` of the 2-D window `src` when TMA can
/// load it as one box shape: a tensor of rank 2 to 5 whose window spans two
/// dims, the second its innermost (contiguous) one; the squeezed dims get
/// box extent 1, so the box lands in shared memory exactly as the 2-D box
/// of the spanned dims would.
pub(crate) fn tma_window_dims(k: &Kernel, src: &TileRef) -> Option<(usize, usize)> {
    let rank = k.buffer(src.buf).shape.len();
    let spanned = src.spanned();
    ((2..=5).contains(&rank) && src.origin.len() == rank && spanned.len() == 2 && spanned[1] == rank - 1)
        .then(|| (spanned[0], spanned[1]))
}

/// The checks of [`Lx::tma_copy_of`] that need no shared layout.
pub(crate) fn tma_candidate(k: &Kernel, src: &TileRef, dst: &TileRef, fill: Option<&Expr>) -> bool {
    let (sb, db) = (k.buffer(src.buf), k.buffer(dst.buf));
    sb.scope == Scope::Global
        && db.scope == Scope::Shared
        && sb.dtype == db.dtype
        && db.shape.len() == 2
        && db.view.is_none()
        && tma_window_dims(k, src).is_some()
        && matches!(sb.dtype, DType::F16 | DType::BF16 | DType::F32 | DType::I32 | DType::U32)
        && dst.origin.iter().all(|e| const_int(e) == Some(0))
        && fill.is_none_or(|f| f.is_zero_constant())
        && k.params.iter().any(|p| p.kind == ParamKind::Tensor(src.buf))
}

/// One pipelined copy issued with TMA.
#[derive(Clone, Debug)]
pub(crate) struct TmaCopy {
    /// The loop it belongs to (its variable).
    pub loop_var: VarId,
    /// Its wait batch in that loop ([`crate::passes::pipeline::wait_batches`]).
    pub batch: usize,
    /// The tensor map parameter.
    pub param: String,
    /// Boxes: (byte offset in the stage, row offset, column offset).
    pub boxes: Vec<(i64, i64, i64)>,
    /// Bytes of all boxes (what the stage's barrier expects).
    pub bytes: i64,
    /// The copy's L2 policy.
    pub cache: CacheHint,
}

/// The mbarriers of one wait batch of a pipelined loop with TMA copies.
#[derive(Clone, Debug)]
pub(crate) struct TmaLoop {
    /// Byte offset in `smem` of `full[0]` (then `full[1]`, ... 8 bytes apart).
    pub bars: i64,
    /// Bytes every stage's boxes deliver.
    pub bytes: i64,
    /// The parity of each stage's next completion, bit `s` for stage `s`.
    pub bits: Reg,
}

/// The statements of the body of the loop over `var`, anywhere in `body`.
fn loop_body(body: &[TStmt], var: VarId) -> Option<&[TStmt]> {
    for s in body {
        match &s.kind {
            StmtKind::For { var: v, body, .. } if *v == var => return Some(body),
            StmtKind::For { body, .. } => {
                if let Some(b) = loop_body(body, var) {
                    return Some(b);
                }
            }
            StmtKind::If { then, otherwise, .. } => {
                if let Some(b) = loop_body(then, var).or_else(|| loop_body(otherwise, var)) {
                    return Some(b);
                }
            }
            _ => {}
        }
    }
    None
}

impl Lx<'_> {
    /// Decides which pipelined copies use TMA (before shared memory is
    /// placed: their buffers get 1024-byte alignment) and declares their
    /// tensor maps.
    fn tma_copy_setup(&mut self, tc: &TmaCopies, pipe: &PipelinePlan) {
        let mut loops: Vec<(VarId, &PipelinedLoop)> = pipe.loops.iter().map(|(v, pl)| (*v, pl)).collect();
        loops.sort_by_key(|(v, _)| *v);
        for (var, pl) in loops {
            let Some(body) = loop_body(&self.k.body, var) else { continue };
            let (batch_of, _) = pipe.wait_batches(self.k, body, pl);
            for (j, &i) in pl.copies.iter().enumerate() {
                let StmtKind::Copy { src, dst, fill, cache } = &body[i].kind else { continue };
                let Some((tensor, boxes, bytes, box_shape, swizzle)) = self.tma_copy_of(src, dst, fill.as_ref()) else {
                    continue;
                };
                let param = format!("tmap{}", self.f.tensor_maps.len());
                self.f.params.push((param.clone(), crate::thread_ir::TENSOR_MAP_PARAM));
                self.f.tensor_maps.push(TensorMapUse { param: param.clone(), tensor, box_shape, swizzle });
                let batch = batch_of.get(j).copied().unwrap_or(0);
                let copy = TmaCopy { loop_var: var, batch, param, boxes, bytes, cache: *cache };
                tc.copies.borrow_mut().insert(dst.buf, copy);
            }
        }
    }

    /// Allocates and initializes (at kernel entry) the loops' barriers.
    fn tma_barrier_setup(&mut self, tc: &TmaCopies, pipe: &PipelinePlan) {
        let mut per_loop: HashMap<(VarId, usize), i64> = HashMap::new();
        for c in tc.copies.borrow().values() {
            *per_loop.entry((c.loop_var, c.batch)).or_insert(0) += c.bytes;
        }
        let mut vars: Vec<(VarId, usize)> = per_loop.keys().copied().collect();
        vars.sort();
        let mut init = Vec::new();
        for (var, batch) in vars {
            let stages = pipe.loops.get(&var).map(|pl| pl.stages as i64).unwrap_or(1);
            let bars = self.alloc_smem_aligned(8 * stages, 8);
            let bits = self.new_reg(RegClass::B32);
            self.emit_pro(Inst::Op { op: "mov.u32".into(), dst: bits, args: vec![Operand::Imm(0)] });
            for s in 0..stages {
                init.push(Stmt::Inst {
                    inst: Inst::MbarInit {
                        addr: Address { base: self.smem.into(), offset: bars + 8 * s },
                        count: Operand::Imm(1),
                    },
                    guard: None,
                });
            }
            tc.loops.borrow_mut().insert((var, batch), TmaLoop { bars, bytes: per_loop[&(var, batch)], bits });
        }
        if init.is_empty() {
            return;
        }
        init.push(Stmt::Inst { inst: Inst::FenceMbarrierInit, guard: None });
        let t0 = self.is_t0;
        self.push_pro(vec![Stmt::If { cond: t0, negate: false, uniform: false, then: init, otherwise: vec![] }]);
        self.emit_pro(Inst::BarSync);
    }

    /// `(tensor param index, boxes, bytes, box shape, swizzle)` when the
    /// copy `src → dst` can be TMA boxes (see the module doc).
    #[allow(clippy::type_complexity)]
    pub(crate) fn tma_copy_of(&self, src: &TileRef, dst: &TileRef, fill: Option<&Expr>) -> Option<TmaCopyOf> {
        if !tma_candidate(self.k, src, dst, fill) {
            return None;
        }
        let tensor = self.k.params.iter().position(|p| p.kind == ParamKind::Tensor(src.buf))?;
        let l = self.shared_layout(dst.buf).ok()?;
        let elem = l.elem;
        // (span bytes, columns per box, bytes between column panels)
        let (swizzle, box_cols) = match l.panel_cols {
            Some(pc) => {
                let sw = Swizzle::of_layout(&SharedLayout { cols: pc, panel_cols: None, ..l })?;
                (sw, pc)
            }
            None => match Swizzle::of_layout(&l) {
                Some(sw) => (sw, l.cols),
                None if l.swizzle.is_none()
                    && l.row_stride == l.cols * elem
                    && (l.cols * elem) % 16 == 0
                    && l.cols <= 256 =>
                {
                    (Swizzle::None, l.cols)
                }
                None => return None,
            },
        };
        if l.cols % box_cols != 0 || l.rows <= 0 {
            return None;
        }
        let box_rows = l.rows.min(256);
        if l.rows % box_rows != 0 || (swizzle != Swizzle::None && box_rows % 8 != 0) {
            return None;
        }
        let mut boxes = Vec::new();
        for p in 0..l.cols / box_cols {
            for j in 0..l.rows / box_rows {
                boxes.push((l.offset(j * box_rows, p * box_cols), j * box_rows, p * box_cols));
            }
        }
        // Each box must start where TMA's swizzle pattern starts.
        let atom = if swizzle == Swizzle::None { 128 } else { 8 * swizzle.bytes() as i64 };
        if boxes.iter().any(|(off, _, _)| off % atom != 0) {
            return None;
        }
        let bytes = l.rows * l.cols * elem;
        // One extent per tensor dim, outermost first: 1 on the squeezed dims.
        let (row_dim, col_dim) = tma_window_dims(self.k, src)?;
        let mut box_shape = vec![1u32; src.origin.len()];
        box_shape[row_dim] = box_rows as u32;
        box_shape[col_dim] = box_cols as u32;
        Some((tensor, boxes, bytes, box_shape, swizzle))
    }

    /// At the start of issuing batch `batch` of a stage of the loop over
    /// `var` (into stage `stage`): thread 0 announces the batch's bytes on
    /// its barrier.
    fn tma_expect_stage(&mut self, tc: &TmaCopies, var: VarId, stage: &Operand, batch: usize) -> R<()> {
        let Some(tl) = tc.loops.borrow().get(&(var, batch)).cloned() else { return Ok(()) };
        let addr = self.tma_bar_addr(&tl, stage);
        let t0 = self.is_t0;
        self.emit_guarded(Inst::MbarArriveExpectTx { addr, tx_bytes: Operand::Imm(tl.bytes) }, Some((t0, false)));
        *tc.issue_stage.borrow_mut() = Some(stage.clone());
        Ok(())
    }

    /// `full[stage]` of a loop's barriers.
    fn tma_bar_addr(&mut self, tl: &TmaLoop, stage: &Operand) -> Address {
        let smem = self.smem;
        match stage {
            Operand::Imm(s) => Address { base: smem.into(), offset: tl.bars + 8 * s },
            other => {
                let a = self.op("mad.lo.s32", RegClass::B32, vec![other.clone(), Operand::Imm(8), smem.into()]);
                Address { base: a.into(), offset: tl.bars }
            }
        }
    }

    /// The pipelined copy into `dst` as thread 0's TMA boxes, when it is one.
    fn tma_issue(&mut self, copies: &TmaCopies, src: &TileRef, dst: &TileRef) -> R<bool> {
        let Some(tc) = copies.copies.borrow().get(&dst.buf).cloned() else { return Ok(false) };
        let tl = copies.loops.borrow().get(&(tc.loop_var, tc.batch)).cloned();
        let tl = tl.ok_or_else(|| self.err("internal: TMA copy without barriers"))?;
        let stage = copies.issue_stage.borrow().clone();
        let stage = stage.ok_or_else(|| self.err("internal: TMA copy outside a stage issue"))?;
        let mbar = self.tma_bar_addr(&tl, &stage);
        // An origin that reads memory (a page index) is thread 0's alone.
        let loads = src.origin.iter().any(has_load);
        let mut origin = Vec::new();
        if !loads {
            origin = self.tma_origin(src)?;
        }
        let (off, _) = *self.shared.get(&dst.buf).ok_or_else(|| self.err("internal: TMA destination not placed"))?;
        let smem = self.smem;
        let base = self.op("add.s32", RegClass::B32, vec![smem.into(), Operand::Imm(off)]);
        let base = self.with_stage(dst.buf, Address { base: base.into(), offset: 0 });
        let param = tc.param.clone();
        let (row_dim, col_dim) =
            tma_window_dims(self.k, src).ok_or_else(|| self.err("internal: TMA copy of a window TMA cannot load"))?;
        let issue = self.capture(|x| {
            if loads {
                origin = x.tma_origin(src)?;
            }
            let map = x.new_reg(RegClass::B64);
            x.emit(Inst::TensorMapAddr { dst: map, param });
            let hint = x.l2_policy(tc.cache);
            x.tma_boxes(map, &base, &tc.boxes, &origin, (row_dim, col_dim), &mbar, hint, dst.buf, None);
            Ok(())
        })?;
        let t0 = self.is_t0;
        self.emit_if(Some(t0), false, issue, vec![]);
        Ok(true)
    }

    /// The window origin of `src`, one `i32` register per tensor dim.
    pub(crate) fn tma_origin(&mut self, src: &TileRef) -> R<Vec<Reg>> {
        let mut origin = Vec::new();
        for e in &src.origin {
            let v = self.expr(e)?;
            let v = self.convert(v, DType::I32)?;
            origin.push(self.materialize(&v));
        }
        Ok(origin)
    }

    /// The L2 policy register a TMA load with `cache` carries
    /// (`createpolicy.fractional.L2::evict_first.b64 p, 1.0` for
    /// [`CacheHint::EvictFirst`]: every line it reads is evicted first);
    /// `None`, and nothing emitted, for the default policy.
    pub(crate) fn l2_policy(&mut self, cache: CacheHint) -> Option<Reg> {
        match cache {
            CacheHint::Normal => None,
            CacheHint::EvictFirst => {
                Some(self.op("createpolicy.fractional.L2::evict_first.b64", RegClass::B64, vec![Operand::F32(1.0)]))
            }
        }
    }

    /// The TMA boxes of one copy: box `(byte offset, row offset, column
    /// offset)` lands at `base + byte offset`, read at the window's
    /// `origin` (one `i32` register per tensor dim) plus the box's offsets
    /// on the spanned `(row, column)` dims, through the map at `map`,
    /// completing on `mbar`, with the L2 policy `hint` ([`Lx::l2_policy`]);
    /// each box names the region of the destination buffer `dst`
    /// ([`Lx::region_of`]: what passes that move waits past a TMA issue ask);
    /// with `multicast` (a `ctaMask`), into every block of the cluster it
    /// names, completing on the barrier at `mbar`'s offset in each.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tma_boxes(
        &mut self,
        map: Reg,
        base: &Address,
        boxes: &[(i64, i64, i64)],
        origin: &[Reg],
        (row_dim, col_dim): (usize, usize),
        mbar: &Address,
        hint: Option<Reg>,
        dst: BufferId,
        multicast: Option<Reg>,
    ) {
        let region = self.region_of(dst);
        for (boff, r0, c0) in boxes {
            let coords = self.box_coords(origin, (row_dim, col_dim), (*r0, *c0));
            self.emit(Inst::TmaLoad {
                dst: Address { base: base.base.clone(), offset: base.offset + boff },
                tmap: map.into(),
                coords,
                mbar: mbar.clone(),
                cache_hint: hint.map(Operand::Reg),
                cta_dst: false,
                multicast: multicast.map(Operand::Reg),
                region,
            });
        }
    }

    /// [`Lx::tma_boxes`]' boxes prefetched into L2 instead of loaded
    /// (`cp.async.bulk.prefetch.tensor`): the same coordinates, no
    /// destination, no barrier.
    pub(crate) fn tma_prefetch_boxes(
        &mut self,
        map: Reg,
        boxes: &[(i64, i64, i64)],
        origin: &[Reg],
        dims: (usize, usize),
        hint: Option<Reg>,
    ) {
        for (_, r0, c0) in boxes {
            let coords = self.box_coords(origin, dims, (*r0, *c0));
            self.emit(Inst::TmaPrefetch { tmap: map.into(), coords, cache_hint: hint.map(Operand::Reg) });
        }
    }

    /// A box's coordinates, innermost first: the window's `origin` plus the
    /// box's `(row, column)` offsets on the spanned dims; a squeezed dim's
    /// is its index (out of range, TMA reads the whole box as zeros).
    fn box_coords(&mut self, origin: &[Reg], (row_dim, col_dim): (usize, usize), (r0, c0): (i64, i64)) -> Vec<Operand> {
        let col = self.add_i32(origin[col_dim].into(), Operand::Imm(c0));
        let row = self.add_i32(origin[row_dim].into(), Operand::Imm(r0));
        let mut coords = vec![col];
        for d in (0..col_dim).rev() {
            coords.push(if d == row_dim { row.clone() } else { Operand::Reg(origin[d]) });
        }
        coords
    }

    /// Every thread waits for batch `batch` of stage `cur` of the loop over
    /// `var` to land.
    fn tma_wait_stage(&mut self, tc: &TmaCopies, var: VarId, cur: Reg, batch: usize) {
        let Some(tl) = tc.loops.borrow().get(&(var, batch)).cloned() else { return };
        let addr = self.tma_bar_addr(&tl, &Operand::Reg(cur));
        let sh = self.op("shr.u32", RegClass::B32, vec![tl.bits.into(), cur.into()]);
        let parity = self.op("and.b32", RegClass::B32, vec![sh.into(), Operand::Imm(1)]);
        let p = self.new_reg(RegClass::Pred);
        self.emit(Inst::MbarWait { addr, parity: parity.into(), pred: p });
        let bit = self.op("shl.b32", RegClass::B32, vec![Operand::Imm(1), cur.into()]);
        self.op_into("xor.b32", tl.bits, vec![tl.bits.into(), bit.into()]);
    }
}

/// A copy as TMA boxes (`Lx::tma_copy_of`): the source tensor's parameter
/// index, the boxes (byte offset in the destination, row and column
/// offsets), the bytes of all of them, the box extents (one per tensor dim,
/// outermost first) and the swizzle.
pub(crate) type TmaCopyOf = (usize, Vec<(i64, i64, i64)>, i64, Vec<u32>, Swizzle);

/// The TMA copies of one kernel's lowering: which pipelined copies are TMA
/// boxes, the barriers of their loops, the stage being issued.
#[derive(Default)]
pub(crate) struct TmaCopies {
    /// The pipelined copies issued with TMA, by destination buffer.
    copies: RefCell<HashMap<BufferId, TmaCopy>>,
    /// The barriers of the pipelined loops with TMA copies, by loop
    /// variable and wait batch.
    loops: RefCell<HashMap<(VarId, usize), TmaLoop>>,
    /// The stage being issued, while a stage issue lasts.
    issue_stage: RefCell<Option<Operand>>,
}

impl StageHooks for TmaCopies {
    fn place_buffers(&self, lx: &mut Lx<'_>, plan: &PipelinePlan) {
        lx.tma_copy_setup(self, plan);
    }
    fn buffer_alignment(&self, buf: BufferId, align: i64) -> i64 {
        // TMA boxes start on their swizzle pattern's 1024 bytes.
        if self.issues(buf) {
            align.max(1024)
        } else {
            align
        }
    }
    fn after_buffers(&self, lx: &mut Lx<'_>, plan: &PipelinePlan) {
        lx.tma_barrier_setup(self, plan);
    }
    fn issues(&self, buf: BufferId) -> bool {
        self.copies.borrow().contains_key(&buf)
    }
    fn begin_stage(&self, lx: &mut Lx<'_>, var: VarId, stage: &Operand, batch: usize) -> R<()> {
        lx.tma_expect_stage(self, var, stage, batch)
    }
    fn issue_copy(&self, lx: &mut Lx<'_>, src: &TileRef, dst: &TileRef) -> R<bool> {
        lx.tma_issue(self, src, dst)
    }
    fn end_stage(&self) {
        *self.issue_stage.borrow_mut() = None;
    }
    fn wait_stage(&self, lx: &mut Lx<'_>, var: VarId, cur: Reg, batch: usize) {
        lx.tma_wait_stage(self, var, cur, batch);
    }
}

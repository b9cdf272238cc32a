//! The CPU interpreter: executes the Tile IR block by block.
//!
//! Expects: a kernel (it is verified first; a kernel that does not verify is
//! an error listing every problem), its arguments in `kernel.params` order,
//! and for [`run`] the values of `kernel.dims` (as from
//! [`crate::abi::bind_dims`]) and the grid (as from [`crate::abi::eval_grid`]);
//! [`launch`] computes both from the arguments' shapes. Guarantees: never panics; every
//! malformed input or run-time fault is an [`InterpError`] with a message
//! naming the tensor, buffer or block concerned.
//!
//! Semantics (block-level, as documented in [`crate::ir`]):
//! - Blocks run one after another, x fastest, then y, then z (unless
//!   `rasterize` reorders x and y). The body runs
//!   once per block; tile ops act on whole tiles; the iterations of every loop
//!   (serial, parallel, pipelined) run in order.
//! - Shared, fragment and local buffers are fresh per block and start zeroed
//!   (on the GPU their contents are undefined: a kernel must not rely on it).
//!   Every buffer, global or not, is kept as little-endian bytes of its dtype,
//!   so values are rounded to f16/bf16 (round to nearest even) whenever they
//!   are stored in such a buffer.
//! - Arithmetic: f32 in f32 (not f64); f16/bf16 computed in f32 and rounded
//!   to the type; integers wrap; integer division and remainder truncate, and
//!   division by zero is an error; shifts read the amount as unsigned and
//!   give 0 (or the sign for `>>` on i32) from the bit width on (as PTX);
//!   `min`/`max` on floats return the non-NaN operand; `rsqrt(x)` is
//!   `1 / sqrt(x)`; `fma` rounds once in f32.
//! - Casts and copy conversions follow Rust `as` (float→int truncates and
//!   saturates, NaN → 0; int→int wraps; to f16/bf16 rounds to nearest even).
//! - `select` evaluates only the chosen operand.
//! - Global element loads out of bounds give 0; stores and atomics out of
//!   bounds are skipped. Out-of-bounds accesses to shared/fragment/local
//!   buffers are errors (undefined on the GPU).
//! - `Copy`: a global side's window is the other side's shape right-aligned
//!   with the tensor's dims (leading extents 1), its corner the origin;
//!   masked reads give the fill value (else 0), masked writes are skipped;
//!   elements are converted to the destination dtype.
//! - `Reduce` accumulates floats in f32 (integers in their type), in index
//!   order, then converts to the destination's dtype; `keep` combines the
//!   result with the destination's current value. Identities: 0 for sum,
//!   -inf (integer minimum) for max, +inf (integer maximum) for min.
//! - `Gemm`: `c = (clear ? 0 : c) + Σ_k op(a)[m, k] · op(b)[k, n]`, the
//!   stored f16/bf16 operands multiplied in f32 (exactly) and accumulated in
//!   f32 in the order of `k`, ascending; the warp policy does not change the
//!   result. (Tensor cores sum in another order: compare with a tolerance.)
//! - `rasterize` (`use_swizzle`): blocks run in the order of the GPU's linear
//!   block id, remapped by [`crate::abi::rasterize`] (every block once).
//! - `AtomicAdd` reads, adds in the element type (f16/bf16 via f32), writes.
//! - A write to a tensor passed as [`TensorData::Ro`] is an error.
//! - `Print` writes its line ([`crate::print_format::render`]) to stderr, or
//!   to the capture of [`capture_prints`].

mod scalar;

pub use scalar::cast;

use crate::ir::{
    BinOp, Buffer, BufferId, DType, Expr, Extent, Kernel, ParamKind, ReduceOp, Scope, Stmt, StmtKind, TileRef, Value,
    VarId, VarKind,
};
use crate::verify::verify;

/// The bytes of one tensor argument: little-endian elements of its dtype, row-major.
pub enum TensorData<'a> {
    /// A tensor the kernel only reads (`&Tensor`).
    Ro(&'a [u8]),
    /// A tensor the kernel may write (`&mut Tensor`); written in place.
    Rw(&'a mut [u8]),
}

/// One kernel argument, in `kernel.params` order.
pub enum Arg<'a> {
    /// A tensor parameter's argument.
    Tensor {
        /// Its bytes.
        data: TensorData<'a>,
        /// Its shape, outermost first (the dynamic dims are bound from it).
        shape: Vec<usize>,
    },
    /// A scalar parameter's value (of the parameter's type).
    Scalar(Value),
}

/// A kernel the interpreter could not run, or a run that went wrong (an
/// out-of-bounds shared access, division by zero, a check-mode finding): the
/// message names the kernel, the statement (its source line when known) and
/// the values involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("interpreter: {0}")]
pub struct InterpError(pub String);

fn fail<T>(msg: impl Into<String>) -> Result<T, InterpError> {
    Err(InterpError(msg.into()))
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Writes one printed line: into the capture of [`capture_prints`] when one
/// is active on this thread, else to stderr.
fn emit_print(line: &str) {
    let captured = CAPTURE.with(|c| match c.borrow_mut().as_mut() {
        Some(buf) => {
            buf.push_str(line);
            true
        }
        None => false,
    });
    if !captured {
        eprint!("{line}");
    }
}

/// Runs `f` with the lines that kernels' `print`s write in the interpreter
/// on this thread collected into the returned string instead of stderr
/// (nested captures each get their own lines).
pub fn capture_prints<R>(f: impl FnOnce() -> R) -> (R, String) {
    let saved = CAPTURE.with(|c| c.borrow_mut().replace(String::new()));
    struct Restore(Option<Option<String>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let saved = self.0.take().flatten();
            CAPTURE.with(|c| *c.borrow_mut() = saved);
        }
    }
    let guard = Restore(Some(saved));
    let r = f();
    let out = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    drop(guard);
    (r, out)
}

/// Runs every block of the grid. `dims` are the values of `kernel.dims`.
pub fn run(kernel: &Kernel, args: &mut [Arg<'_>], dims: &[i64], grid: [u32; 3]) -> Result<(), InterpError> {
    run_with(kernel, args, dims, grid, Options::default())
}

/// How the interpreter runs a kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Check mode: a read of a shared, fragment or local element that no
    /// statement of the block has written yet (undefined on the GPU, where
    /// these buffers start with garbage) is an error naming the buffer, the
    /// indices, the block and the statement (its source line when the
    /// kernel has [`Kernel::source`]). Out-of-bounds accesses of these
    /// buffers are errors in every mode. The runtime turns it on with
    /// `TILE_INTERPRET_CHECK=1`.
    pub check: bool,
}

/// [`run`] with [`Options`].
pub fn run_with(
    kernel: &Kernel,
    args: &mut [Arg<'_>],
    dims: &[i64],
    grid: [u32; 3],
    options: Options,
) -> Result<(), InterpError> {
    if let Err(errors) = verify(kernel) {
        let list: Vec<String> = errors.iter().map(|e| e.message.clone()).collect();
        return fail(format!("kernel `{}` does not verify: {}", kernel.name, list.join("; ")));
    }
    let mut m = Machine::new(kernel, args, dims)?;
    if options.check {
        m.init = m.bufs.iter().map(|b| if b.is_global() { Vec::new() } else { vec![false; b.len] }).collect();
    }
    for z in 0..grid[2] {
        for linear in 0..u64::from(grid[0]) * u64::from(grid[1]) {
            let (x, y) = match kernel.rasterize {
                Some(panel) => crate::abi::rasterize(panel, grid[0], grid[1], linear),
                None => ((linear % u64::from(grid[0])) as u32, (linear / u64::from(grid[0])) as u32),
            };
            m.run_block([x, y, z]).map_err(|e| InterpError(format!("block ({x}, {y}, {z}): {}", e.0)))?;
        }
    }
    Ok(())
}

/// Binds the dynamic dims from the tensor arguments' shapes
/// ([`crate::abi::bind_dims`]), evaluates the grid ([`crate::abi::eval_grid`])
/// and runs every block: the whole launch, as the GPU path does it.
pub fn launch(kernel: &Kernel, args: &mut [Arg<'_>]) -> Result<(), InterpError> {
    launch_with(kernel, args, Options::default())
}

/// [`launch`] with [`Options`].
pub fn launch_with(kernel: &Kernel, args: &mut [Arg<'_>], options: Options) -> Result<(), InterpError> {
    if args.len() != kernel.params.len() {
        return fail(format!("kernel `{}` takes {} arguments, got {}", kernel.name, kernel.params.len(), args.len()));
    }
    if let Err(errors) = verify(kernel) {
        let list: Vec<String> = errors.iter().map(|e| e.message.clone()).collect();
        return fail(format!("kernel `{}` does not verify: {}", kernel.name, list.join("; ")));
    }
    let shapes: Vec<Option<&[usize]>> = args
        .iter()
        .map(|a| match a {
            Arg::Tensor { shape, .. } => Some(shape.as_slice()),
            Arg::Scalar(_) => None,
        })
        .collect();
    let dims = crate::abi::bind_dims(kernel, &shapes).map_err(|e| InterpError(e.message))?;
    let grid = crate::abi::eval_grid(kernel, &dims).map_err(InterpError)?;
    run_with(kernel, args, &dims, grid, options)
}

/// The memory behind one buffer.
enum Mem<'a> {
    Ro(&'a [u8]),
    Rw(&'a mut [u8]),
    Owned(Vec<u8>),
}

impl Mem<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Mem::Ro(b) => b,
            Mem::Rw(b) => b,
            Mem::Owned(b) => b,
        }
    }
}

/// A buffer with its shape resolved for this launch.
struct Buf<'k, 'a> {
    decl: &'k Buffer,
    mem: Mem<'a>,
    shape: Vec<usize>,
    len: usize,
}

impl<'k> Buf<'k, '_> {
    fn is_global(&self) -> bool {
        self.decl.scope == Scope::Global
    }

    /// The bytes to write, or an error if the buffer may not be written.
    fn bytes_mut(&mut self) -> Result<&mut [u8], InterpError> {
        if self.is_global() && !self.decl.mutable {
            return fail(format!("the kernel writes `{}`, a read-only tensor", self.decl.name));
        }
        match &mut self.mem {
            Mem::Ro(_) => fail(format!("the kernel writes `{}`, but it was passed read-only", self.decl.name)),
            Mem::Rw(b) => Ok(b),
            Mem::Owned(b) => Ok(b),
        }
    }
}

/// The largest shared/fragment/local buffer the interpreter allocates (far
/// above what any GPU block holds; it guards against absurd shapes).
const MAX_BLOCK_BUFFER_BYTES: usize = 1 << 28;

/// The size in bytes of an array of `shape`, if it fits in `usize`.
fn byte_size(shape: &[usize], t: DType) -> Option<usize> {
    shape.iter().try_fold(t.size_bytes() as usize, |acc, &n| acc.checked_mul(n))
}

/// Two distinct elements of a slice, mutably.
fn two_mut<T>(v: &mut [T], i: usize, j: usize) -> (&mut T, &mut T) {
    debug_assert_ne!(i, j);
    if i < j {
        let (a, b) = v.split_at_mut(j);
        (&mut a[i], &mut b[0])
    } else {
        let (a, b) = v.split_at_mut(i);
        (&mut b[0], &mut a[j])
    }
}

struct Machine<'k, 'a> {
    k: &'k Kernel,
    vars: Vec<Option<Value>>,
    bufs: Vec<Buf<'k, 'a>>,
    /// Check mode: per buffer, which elements this block has written
    /// (empty for tensors, and for every buffer outside check mode).
    init: Vec<Vec<bool>>,
    /// Whether the error being returned already names its statement.
    located: bool,
}

impl<'k, 'a> Machine<'k, 'a> {
    fn new(k: &'k Kernel, args: &'a mut [Arg<'_>], dims: &[i64]) -> Result<Self, InterpError> {
        if args.len() != k.params.len() {
            return fail(format!("kernel `{}` takes {} arguments, got {}", k.name, k.params.len(), args.len()));
        }
        if dims.len() != k.dims.len() {
            return fail(format!(
                "kernel `{}` has {} dynamic dimensions, got {} values",
                k.name,
                k.dims.len(),
                dims.len()
            ));
        }
        let mut vars: Vec<Option<Value>> = vec![None; k.vars.len()];
        for (&d, &value) in k.dims.iter().zip(dims) {
            if !(0..=i32::MAX as i64).contains(&value) {
                return fail(format!("dimension `{}` = {value} is outside 0..=i32::MAX", k.var(d).name));
            }
            vars[d.0 as usize] = Some(Value::I32(value as i32));
        }
        let dim_vars = vars.clone();
        let dim_value = |e: &Extent| -> usize {
            match e {
                Extent::Const(c) => *c as usize,
                // Verified: every Dyn var is listed in dims and bound above.
                Extent::Dyn(v) => match dim_vars[v.0 as usize] {
                    Some(Value::I32(x)) => x as usize,
                    _ => 0,
                },
            }
        };
        let mut globals: Vec<Option<(Mem<'a>, Vec<usize>)>> = (0..k.buffers.len()).map(|_| None).collect();
        for (param, arg) in k.params.iter().zip(args.iter_mut()) {
            match (param.kind.clone(), arg) {
                (ParamKind::Scalar(v), Arg::Scalar(value)) => {
                    let want = k.var(v).dtype;
                    if value.dtype() != want {
                        return fail(format!("scalar `{}` expects {want}, got {}", param.name, value.dtype()));
                    }
                    vars[v.0 as usize] = Some(*value);
                }
                (ParamKind::Tensor(b), Arg::Tensor { data, shape }) => {
                    let decl = k.buffer(b);
                    let want: Vec<usize> = decl.shape.iter().map(dim_value).collect();
                    if *shape != want {
                        return fail(format!("tensor `{}` expects shape {want:?}, got {shape:?}", param.name));
                    }
                    let Some(bytes) = byte_size(&want, decl.dtype) else {
                        return fail(format!("tensor `{}` of shape {want:?} is too large to address", param.name));
                    };
                    let mem = match data {
                        TensorData::Ro(d) => Mem::Ro(d),
                        TensorData::Rw(d) => Mem::Rw(d),
                    };
                    if mem.bytes().len() != bytes {
                        return fail(format!(
                            "tensor `{}` of shape {want:?} and type {} needs {bytes} bytes, got {}",
                            param.name,
                            decl.dtype,
                            mem.bytes().len()
                        ));
                    }
                    globals[b.0 as usize] = Some((mem, want));
                }
                (ParamKind::Scalar(_), Arg::Tensor { .. }) => {
                    return fail(format!("argument `{}` must be a scalar, got a tensor", param.name))
                }
                (ParamKind::Tensor(_), Arg::Scalar(_)) => {
                    return fail(format!("argument `{}` must be a tensor, got a scalar", param.name))
                }
            }
        }
        let mut bufs = Vec::with_capacity(k.buffers.len());
        for (decl, global) in k.buffers.iter().zip(globals) {
            let (mem, shape) = match global {
                Some(g) => g,
                None if decl.scope == Scope::Global => return fail(format!("tensor `{}` has no argument", decl.name)),
                None => {
                    let shape: Vec<usize> = decl.shape.iter().map(dim_value).collect();
                    match byte_size(&shape, decl.dtype) {
                        Some(bytes) if bytes <= MAX_BLOCK_BUFFER_BYTES => (Mem::Owned(vec![0; bytes]), shape),
                        _ => {
                            return fail(format!(
                                "{} `{}` of shape {shape:?} is larger than the interpreter's limit of {MAX_BLOCK_BUFFER_BYTES} bytes",
                                scope_word(decl.scope),
                                decl.name
                            ))
                        }
                    }
                }
            };
            let len = shape.iter().product();
            bufs.push(Buf { decl, mem, shape, len });
        }
        Ok(Machine { k, vars, bufs, init: Vec::new(), located: false })
    }

    fn run_block(&mut self, block: [u32; 3]) -> Result<(), InterpError> {
        for buf in &mut self.bufs {
            if let Mem::Owned(b) = &mut buf.mem {
                b.fill(0);
            }
        }
        for w in &mut self.init {
            w.fill(false);
        }
        for (i, var) in self.k.vars.iter().enumerate() {
            match var.kind {
                VarKind::BlockIdx(axis) => {
                    let b = block.get(axis as usize).copied().unwrap_or(0);
                    self.vars[i] = Some(cast(Value::I64(b as i64), var.dtype));
                }
                VarKind::Let | VarKind::Mut | VarKind::Loop => self.vars[i] = None,
                VarKind::Dim | VarKind::Param => {}
            }
        }
        let body = &self.k.body;
        self.block(body)
    }

    fn block(&mut self, stmts: &'k [Stmt]) -> Result<(), InterpError> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    /// Runs one statement; its error names it (the innermost statement that
    /// failed: a loop's or `if`'s own only for its bounds or condition).
    fn stmt(&mut self, s: &'k Stmt) -> Result<(), InterpError> {
        self.stmt_inner(s).map_err(|e| {
            if self.located {
                return e;
            }
            self.located = true;
            let text = crate::print::print_stmt(self.k, s);
            let text = text.strip_suffix(" {").unwrap_or(&text);
            match self.k.source_line(s.span) {
                Some(line) => InterpError(format!("at {line} (`{text}`): {}", e.0)),
                None => InterpError(format!("in `{text}`: {}", e.0)),
            }
        })
    }

    /// Check mode: every element of `buf` written (a tile op's destination).
    fn mark_all(&mut self, buf: BufferId) {
        if let Some(w) = self.init.get_mut(buf.0 as usize) {
            w.fill(true);
        }
    }

    /// Check mode: element `i` of `buf` written.
    fn mark(&mut self, buf: BufferId, i: usize) {
        if let Some(slot) = self.init.get_mut(buf.0 as usize).and_then(|w| w.get_mut(i)) {
            *slot = true;
        }
    }

    /// Check mode: element `i` of `buf` must have been written.
    fn check_read(&self, buf: BufferId, i: usize) -> Result<(), InterpError> {
        match self.init.get(buf.0 as usize).and_then(|w| w.get(i)) {
            Some(false) => {
                let b = &self.bufs[buf.0 as usize];
                let mut index = vec![0usize; b.shape.len()];
                let mut f = i;
                for d in (0..b.shape.len()).rev() {
                    index[d] = f % b.shape[d].max(1);
                    f /= b.shape[d].max(1);
                }
                fail(format!(
                    "read of {} `{}` at {index:?}, which this block has not written (uninitialized: on the GPU it holds garbage)",
                    scope_word(b.decl.scope),
                    b.decl.name
                ))
            }
            _ => Ok(()),
        }
    }

    /// Check mode: every element of `buf` must have been written (a tile
    /// op's source).
    fn check_all(&self, buf: BufferId) -> Result<(), InterpError> {
        if let Some(i) = self.init.get(buf.0 as usize).and_then(|w| w.iter().position(|x| !x)) {
            return self.check_read(buf, i);
        }
        Ok(())
    }

    /// Runs one statement. A tile op on a view of a shared buffer works on
    /// the view's own copy of the window: filled from the parent before the
    /// op, written back into the parent after it when the op writes the view
    /// (element accesses go to the parent directly, [`Machine::through_view`]),
    /// so the parent always holds the block's values between statements.
    fn stmt_inner(&mut self, s: &'k Stmt) -> Result<(), InterpError> {
        let (touched, written): (Vec<BufferId>, Option<BufferId>) = match &s.kind {
            StmtKind::Copy { src, dst, .. } => (vec![src.buf, dst.buf], Some(dst.buf)),
            StmtKind::Fill { buf, .. } => (vec![*buf], Some(*buf)),
            StmtKind::Reduce { src, dst, .. } => (vec![*src, *dst], Some(*dst)),
            StmtKind::Gemm { a, b, c, .. } => (vec![*a, *b, *c], Some(*c)),
            _ => (Vec::new(), None),
        };
        let views: Vec<BufferId> = touched.into_iter().filter(|b| self.k.buffer(*b).view.is_some()).collect();
        if views.is_empty() {
            return self.stmt_op(s);
        }
        for &v in &views {
            self.sync_view(v, false)?;
        }
        self.stmt_op(s)?;
        if let Some(w) = written.filter(|w| views.contains(w)) {
            self.sync_view(w, true)?;
        }
        Ok(())
    }

    /// `view`'s element `i` as its parent's element (itself when not a view).
    fn through_view(&self, view: BufferId, i: usize) -> (BufferId, usize) {
        let (root, origin) = self.k.view_root(view);
        if root == view {
            return (view, i);
        }
        let (vs, ps) = (&self.bufs[view.0 as usize].shape, &self.bufs[root.0 as usize].shape);
        let mut f = i;
        let mut coord = vec![0usize; vs.len()];
        for d in (0..vs.len()).rev() {
            coord[d] = f % vs[d].max(1) + origin.get(d).copied().unwrap_or(0) as usize;
            f /= vs[d].max(1);
        }
        (root, coord.iter().zip(ps).fold(0, |acc, (c, n)| acc * n + c))
    }

    /// Copies the window between `view` and its parent: parent → view
    /// (`back` false), or view → parent (`back`), values and check-mode marks.
    fn sync_view(&mut self, view: BufferId, back: bool) -> Result<(), InterpError> {
        let (root, _) = self.k.view_root(view);
        let t = self.bufs[view.0 as usize].decl.dtype;
        for i in 0..self.bufs[view.0 as usize].len {
            let (_, j) = self.through_view(view, i);
            let (from, fi, to, ti) = if back { (view, i, root, j) } else { (root, j, view, i) };
            let x = scalar::read(self.bufs[from.0 as usize].mem.bytes(), t, fi);
            scalar::write(self.bufs[to.0 as usize].bytes_mut()?, t, ti, x);
            let mark = self.init.get(from.0 as usize).and_then(|w| w.get(fi)).copied();
            if let (Some(m), Some(slot)) = (mark, self.init.get_mut(to.0 as usize).and_then(|w| w.get_mut(ti))) {
                *slot = m;
            }
        }
        Ok(())
    }

    fn stmt_op(&mut self, s: &'k Stmt) -> Result<(), InterpError> {
        match &s.kind {
            StmtKind::Let { var, value } | StmtKind::Assign { var, value } => {
                let v = self.eval(value)?;
                self.vars[var.0 as usize] = Some(v);
            }
            StmtKind::Store { buf, index, value } => {
                let v = self.eval(value)?;
                if let Some(i) = self.element(*buf, index)? {
                    let (buf, i) = self.through_view(*buf, i);
                    self.mark(buf, i);
                    let b = &mut self.bufs[buf.0 as usize];
                    let t = b.decl.dtype;
                    scalar::write(b.bytes_mut()?, t, i, v);
                }
            }
            StmtKind::AtomicAdd { buf, index, value } => {
                let v = self.eval(value)?;
                if let Some(i) = self.element(*buf, index)? {
                    let b = &mut self.bufs[buf.0 as usize];
                    let t = b.decl.dtype;
                    let bytes = b.bytes_mut()?;
                    let old = scalar::read(bytes, t, i);
                    let new = scalar::binary(BinOp::Add, old, cast(v, t))?;
                    scalar::write(bytes, t, i, new);
                }
            }
            StmtKind::For { var, start, end, kind: _, body } => {
                let a = scalar::as_index(self.eval(start)?)?;
                let b = scalar::as_index(self.eval(end)?)?;
                let t = self.k.var(*var).dtype;
                for i in a..b {
                    let value = if t == DType::I32 { Value::I32(i as i32) } else { cast(Value::I64(i), t) };
                    self.vars[var.0 as usize] = Some(value);
                    self.block(body)?;
                }
            }
            StmtKind::If { cond, then, otherwise } => {
                if scalar::as_bool(self.eval(cond)?)? {
                    self.block(then)?;
                } else {
                    self.block(otherwise)?;
                }
            }
            StmtKind::Copy { src, dst, fill, .. } => {
                self.check_all(src.buf)?;
                self.copy(src, dst, fill.as_ref())?;
                self.mark_all(dst.buf);
            }
            StmtKind::Fill { buf, value } => {
                let v = self.eval(value)?;
                self.mark_all(*buf);
                let b = &mut self.bufs[buf.0 as usize];
                let t = b.decl.dtype;
                let n = b.len;
                let bytes = b.bytes_mut()?;
                for i in 0..n {
                    scalar::write(bytes, t, i, v);
                }
            }
            StmtKind::Reduce { op, src, dst, dim, keep } => {
                self.check_all(*src)?;
                if *keep {
                    self.check_all(*dst)?;
                }
                self.reduce(*op, *src, *dst, *dim, *keep)?;
                self.mark_all(*dst);
            }
            StmtKind::Barrier => {}
            StmtKind::Print { format, args } => {
                let pieces = crate::print_format::parse(format).map_err(InterpError)?;
                let mut values = Vec::with_capacity(args.len());
                for a in args {
                    values.push(self.eval(a)?);
                }
                emit_print(&crate::print_format::render(&pieces, &values));
            }
            StmtKind::Gemm { a, b, c, trans_a, trans_b, clear, policy: _ } => {
                self.check_all(*a)?;
                self.check_all(*b)?;
                if !*clear {
                    self.check_all(*c)?;
                }
                self.gemm(*a, *b, *c, *trans_a, *trans_b, *clear)?;
                self.mark_all(*c);
            }
        }
        Ok(())
    }

    /// The linear index of an element, or `None` for a global access out of
    /// bounds. Out of bounds elsewhere is an error.
    fn element(&self, buf: BufferId, index: &[Expr]) -> Result<Option<usize>, InterpError> {
        let b = &self.bufs[buf.0 as usize];
        if index.len() != b.shape.len() {
            return fail(format!("`{}` has rank {}, indexed with {} indices", b.decl.name, b.shape.len(), index.len()));
        }
        let mut linear = 0usize;
        let mut inside = true;
        for d in 0..index.len() {
            // Indices are mostly loop variables: read them without `eval`.
            let i = match &index[d] {
                Expr::Var(v) => match self.vars.get(v.0 as usize) {
                    Some(Some(Value::I32(x))) => *x as i64,
                    _ => scalar::as_index(self.eval(&index[d])?)?,
                },
                e => scalar::as_index(self.eval(e)?)?,
            };
            let n = b.shape[d];
            if i >= 0 && (i as u64) < n as u64 {
                linear = linear * n + i as usize;
            } else {
                if !b.is_global() {
                    let mut all = Vec::with_capacity(index.len());
                    for e in index {
                        all.push(scalar::as_index(self.eval(e)?)?);
                    }
                    return fail(format!(
                        "index {all:?} is out of bounds for {} `{}` of shape {:?}",
                        scope_word(b.decl.scope),
                        b.decl.name,
                        b.shape
                    ));
                }
                inside = false;
            }
        }
        Ok(if inside { Some(linear) } else { None })
    }

    fn eval(&self, e: &Expr) -> Result<Value, InterpError> {
        Ok(match e {
            Expr::Const(v) => *v,
            Expr::Var(v) => match self.vars.get(v.0 as usize) {
                Some(Some(x)) => *x,
                _ => return fail(format!("variable {} is used before it is bound", self.var_name(*v))),
            },
            Expr::Load { buf, index } => match self.element(*buf, index)? {
                Some(i) => {
                    let (buf, i) = self.through_view(*buf, i);
                    self.check_read(buf, i)?;
                    let b = &self.bufs[buf.0 as usize];
                    scalar::read(b.mem.bytes(), b.decl.dtype, i)
                }
                None => scalar::zero(self.bufs[buf.0 as usize].decl.dtype),
            },
            Expr::Unary { op, arg } => scalar::unary(*op, self.eval(arg)?)?,
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.eval(lhs)?, self.eval(rhs)?);
                // Fast paths for the common f32 math and i32 index arithmetic.
                match (op, a, b) {
                    (BinOp::Add, Value::F32(x), Value::F32(y)) => Value::F32(x + y),
                    (BinOp::Sub, Value::F32(x), Value::F32(y)) => Value::F32(x - y),
                    (BinOp::Mul, Value::F32(x), Value::F32(y)) => Value::F32(x * y),
                    (BinOp::Div, Value::F32(x), Value::F32(y)) => Value::F32(x / y),
                    (BinOp::Add, Value::I32(x), Value::I32(y)) => Value::I32(x.wrapping_add(y)),
                    (BinOp::Sub, Value::I32(x), Value::I32(y)) => Value::I32(x.wrapping_sub(y)),
                    (BinOp::Mul, Value::I32(x), Value::I32(y)) => Value::I32(x.wrapping_mul(y)),
                    _ => scalar::binary(*op, a, b)?,
                }
            }
            Expr::Fma { a, b, c } => scalar::fma(self.eval(a)?, self.eval(b)?, self.eval(c)?)?,
            Expr::Cast { to, arg } => cast(self.eval(arg)?, *to),
            Expr::Select { cond, then, otherwise } => {
                if scalar::as_bool(self.eval(cond)?)? {
                    self.eval(then)?
                } else {
                    self.eval(otherwise)?
                }
            }
        })
    }

    fn var_name(&self, v: VarId) -> String {
        self.k.vars.get(v.0 as usize).map_or_else(|| v.to_string(), |x| format!("`{}`", x.name))
    }

    fn copy(&mut self, src: &TileRef, dst: &TileRef, fill: Option<&Expr>) -> Result<(), InterpError> {
        let (s, d) = (src.buf.0 as usize, dst.buf.0 as usize);
        let fill = match fill {
            Some(f) => Some(self.eval(f)?),
            None => None,
        };
        let src_global = self.bufs[s].is_global();
        let dst_global = self.bufs[d].is_global();
        if src_global && dst_global {
            return fail("copy between two global tensors");
        }
        if !src_global && !dst_global {
            if self.bufs[s].shape != self.bufs[d].shape {
                return fail(format!(
                    "copy from `{}` to `{}`: the shapes differ",
                    self.bufs[s].decl.name, self.bufs[d].decl.name
                ));
            }
            if s == d {
                return Ok(());
            }
            let (sb, db) = two_mut(&mut self.bufs, s, d);
            let (st, dt) = (sb.decl.dtype, db.decl.dtype);
            let src_bytes = sb.mem.bytes();
            let dst_bytes = db.bytes_mut()?;
            for i in 0..sb.len {
                scalar::write(dst_bytes, dt, i, scalar::read(src_bytes, st, i));
            }
            return Ok(());
        }
        // One global side: evaluate the origin, then walk the local side.
        let (g, gref, l) = if src_global { (s, src, d) } else { (d, dst, s) };
        let mut origin = Vec::with_capacity(gref.origin.len());
        for e in &gref.origin {
            origin.push(scalar::as_index(self.eval(e)?)?);
        }
        let gshape = self.bufs[g].shape.clone();
        let lshape = self.bufs[l].shape.clone();
        let spanned = gref.spanned();
        if origin.len() != gshape.len() || lshape.len() != spanned.len() {
            return fail(format!("copy: the tile of `{}` does not match its rank", self.bufs[g].decl.name));
        }
        let (gb, lb) = two_mut(&mut self.bufs, g, l);
        let (gt, lt) = (gb.decl.dtype, lb.decl.dtype);
        if !gref.squeezes_leading_only() {
            // Squeezed dims inside the window: element by element.
            let fill = fill.unwrap_or_else(|| scalar::zero(lt));
            let n: usize = lshape.iter().product();
            let mut gc = origin.clone();
            for i in 0..n {
                let mut f = i;
                for (a, &dim) in spanned.iter().enumerate().rev() {
                    gc[dim] = origin[dim] + (f % lshape[a]) as i64;
                    f /= lshape[a];
                }
                let mut linear = Some(0usize);
                for (c, &e) in gc.iter().zip(&gshape) {
                    linear = match linear {
                        Some(x) if *c >= 0 && (*c as usize) < e => Some(x * e + *c as usize),
                        _ => None,
                    };
                }
                if src_global {
                    let x = match linear {
                        Some(j) => cast(scalar::read(gb.mem.bytes(), gt, j), lt),
                        None => fill,
                    };
                    scalar::write(lb.bytes_mut()?, lt, i, x);
                } else if let Some(j) = linear {
                    let x = cast(scalar::read(lb.mem.bytes(), lt, i), gt);
                    scalar::write(gb.bytes_mut()?, gt, j, x);
                }
            }
            return Ok(());
        }
        if src_global {
            let fill = fill.unwrap_or_else(|| scalar::zero(lt));
            copy_window(gb.mem.bytes(), gt, &gshape, &origin, lb.bytes_mut()?, lt, &lshape, fill);
        } else {
            copy_window_store(gb.bytes_mut()?, gt, &gshape, &origin, lb.mem.bytes(), lt, &lshape);
        }
        Ok(())
    }

    /// `c = (clear ? 0 : c) + op(a) · op(b)`: operands decoded to f32 once,
    /// products and sums in f32, `k` ascending.
    fn gemm(
        &mut self,
        a: BufferId,
        b: BufferId,
        c: BufferId,
        trans_a: bool,
        trans_b: bool,
        clear: bool,
    ) -> Result<(), InterpError> {
        let (ab, bb, cb) = (&self.bufs[a.0 as usize], &self.bufs[b.0 as usize], &self.bufs[c.0 as usize]);
        let (sa, sb, sc) = (&ab.shape, &bb.shape, &cb.shape);
        if sa.len() != 2 || sb.len() != 2 || sc.len() != 2 {
            return fail(format!(
                "gemm of `{}` and `{}` into `{}`: every operand must be a matrix",
                ab.decl.name, bb.decl.name, cb.decl.name
            ));
        }
        let (m, k) = if trans_a { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
        let (kb, n) = if trans_b { (sb[1], sb[0]) } else { (sb[0], sb[1]) };
        if kb != k || sc[0] != m || sc[1] != n || cb.decl.dtype != DType::F32 {
            return fail(format!(
                "gemm of `{}` {sa:?} and `{}` {sb:?} into `{}` {sc:?}: the shapes or types do not match",
                ab.decl.name, bb.decl.name, cb.decl.name
            ));
        }
        // op(a) as row-major [M, K] and op(b) as row-major [K, N], in f32
        // (exact: every f16/bf16 value is an f32).
        let a_mk = decode_matrix(ab.mem.bytes(), ab.decl.dtype, sa[1], m, k, trans_a);
        let b_kn = decode_matrix(bb.mem.bytes(), bb.decl.dtype, sb[1], k, n, trans_b);
        let cb = &mut self.bufs[c.0 as usize];
        let bytes = cb.bytes_mut()?;
        let mut acc: Vec<f32> =
            if clear { vec![0.0; m * n] } else { (0..m * n).map(|i| scalar::read_f32(bytes, i)).collect() };
        for (a_row, c_row) in a_mk.chunks_exact(k.max(1)).zip(acc.chunks_exact_mut(n.max(1))) {
            for (&x, b_row) in a_row.iter().zip(b_kn.chunks_exact(n.max(1))) {
                for (cv, &y) in c_row.iter_mut().zip(b_row) {
                    *cv += x * y;
                }
            }
        }
        for (i, v) in acc.into_iter().enumerate() {
            scalar::write(bytes, DType::F32, i, Value::F32(v));
        }
        Ok(())
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        src: BufferId,
        dst: BufferId,
        dim: usize,
        keep: bool,
    ) -> Result<(), InterpError> {
        let sb = &self.bufs[src.0 as usize];
        let db = &self.bufs[dst.0 as usize];
        if dim >= sb.shape.len() {
            return fail(format!("reduce of `{}` along dim {dim}, but it has rank {}", sb.decl.name, sb.shape.len()));
        }
        let outer: usize = sb.shape[..dim].iter().product();
        let n = sb.shape[dim];
        let inner: usize = sb.shape[dim + 1..].iter().product();
        if outer * inner != db.len {
            return fail(format!("reduce from `{}` into `{}`: the shapes do not match", sb.decl.name, db.decl.name));
        }
        let (st, dt) = (sb.decl.dtype, db.decl.dtype);
        // Floats accumulate in f32, integers in their own type.
        let acc_t = if st.is_float() { DType::F32 } else { st };
        let (bin, init) = match op {
            ReduceOp::Sum => (BinOp::Add, scalar::zero(acc_t)),
            ReduceOp::Max => (BinOp::Max, scalar::extreme(acc_t, true)),
            ReduceOp::Min => (BinOp::Min, scalar::extreme(acc_t, false)),
        };
        let sbytes = sb.mem.bytes();
        let mut results = Vec::with_capacity(outer * inner);
        if st.is_float() {
            // The common case, without the generic `Value` arithmetic.
            let combine: fn(f32, f32) -> f32 = match op {
                ReduceOp::Sum => |a, b| a + b,
                ReduceOp::Max => f32::max,
                ReduceOp::Min => f32::min,
            };
            let init = match init {
                Value::F32(x) => x,
                _ => 0.0,
            };
            for o in 0..outer {
                for i in 0..inner {
                    let mut acc = init;
                    for j in 0..n {
                        let idx = (o * n + j) * inner + i;
                        let x = match st {
                            DType::F32 => scalar::read_f32(sbytes, idx),
                            _ => match scalar::read(sbytes, st, idx) {
                                Value::F16(h) => h.to_f32(),
                                Value::BF16(h) => h.to_f32(),
                                _ => 0.0,
                            },
                        };
                        acc = combine(acc, x);
                    }
                    results.push(Value::F32(acc));
                }
            }
        }
        for o in 0..if st.is_float() { 0 } else { outer } {
            for i in 0..inner {
                let mut acc = init;
                for j in 0..n {
                    let x = cast(scalar::read(sbytes, st, (o * n + j) * inner + i), acc_t);
                    acc = scalar::binary(bin, acc, x)?;
                }
                results.push(acc);
            }
        }
        let db = &mut self.bufs[dst.0 as usize];
        let dbytes = db.bytes_mut()?;
        for (i, r) in results.into_iter().enumerate() {
            let r = if keep { scalar::binary(bin, cast(scalar::read(dbytes, dt, i), acc_t), r)? } else { r };
            scalar::write(dbytes, dt, i, r);
        }
        Ok(())
    }
}

/// Calls `f(local_start, global_start, len, lo, hi)` for each row of the
/// local buffer (its last dimension): the row's elements `lo..hi` lie inside
/// the tensor, at global linear indices `global_start + lo..`; the others are
/// masked. `lo == hi` when the whole row is outside.
fn for_each_row(
    gshape: &[usize],
    origin: &[i64],
    lshape: &[usize],
    mut f: impl FnMut(usize, usize, usize, usize, usize),
) {
    let r = gshape.len();
    let l = lshape.len();
    let lead = r - l;
    let row_len = if l == 0 { 1 } else { lshape[l - 1] };
    let rows: usize = if l == 0 { 1 } else { lshape[..l - 1].iter().product() };
    let mut counter = vec![0usize; l.saturating_sub(1)];
    for row in 0..rows {
        let local_start = row * row_len;
        if r == 0 {
            f(local_start, 0, row_len, 0, row_len);
            continue;
        }
        let mut linear = 0i64;
        let mut valid = true;
        for dim in 0..r - 1 {
            let c = origin[dim] + if dim >= lead { counter[dim - lead] as i64 } else { 0 };
            if c < 0 || c >= gshape[dim] as i64 {
                valid = false;
            }
            linear = linear * gshape[dim] as i64 + c;
        }
        let last = gshape[r - 1] as i64;
        let col0 = origin[r - 1];
        let (lo, hi) = if valid {
            let lo = (-col0).clamp(0, row_len as i64);
            let hi = (last - col0).clamp(lo, row_len as i64);
            (lo as usize, hi as usize)
        } else {
            (0, 0)
        };
        // Only used for lo..hi, where it is a valid (non-negative) index.
        let global_start = if lo < hi { (linear * last + col0) as usize } else { 0 };
        f(local_start, global_start, row_len, lo, hi);
        for dim in (0..counter.len()).rev() {
            counter[dim] += 1;
            if counter[dim] < lshape[dim] {
                break;
            }
            counter[dim] = 0;
        }
    }
}

/// Copies the window of the tensor at `origin` into the local buffer;
/// masked elements get `fill`.
#[allow(clippy::too_many_arguments)]
fn copy_window(
    gbytes: &[u8],
    gt: DType,
    gshape: &[usize],
    origin: &[i64],
    lbytes: &mut [u8],
    lt: DType,
    lshape: &[usize],
    fill: Value,
) {
    let size = gt.size_bytes() as usize;
    for_each_row(gshape, origin, lshape, |ls, gs, len, lo, hi| {
        for j in (0..lo).chain(hi..len) {
            scalar::write(lbytes, lt, ls + j, fill);
        }
        if lo < hi {
            if gt == lt {
                // `global_start + lo` is the element at column `lo`.
                let g0 = gs.wrapping_add(lo);
                lbytes[(ls + lo) * size..(ls + hi) * size].copy_from_slice(&gbytes[g0 * size..(g0 + hi - lo) * size]);
            } else {
                for j in lo..hi {
                    scalar::write(lbytes, lt, ls + j, scalar::read(gbytes, gt, gs.wrapping_add(j)));
                }
            }
        }
    });
}

/// Copies the local buffer into the window of the tensor at `origin`,
/// skipping masked elements.
fn copy_window_store(
    gbytes: &mut [u8],
    gt: DType,
    gshape: &[usize],
    origin: &[i64],
    lbytes: &[u8],
    lt: DType,
    lshape: &[usize],
) {
    let size = gt.size_bytes() as usize;
    for_each_row(gshape, origin, lshape, |ls, gs, _len, lo, hi| {
        if lo < hi {
            if gt == lt {
                let g0 = gs.wrapping_add(lo);
                gbytes[g0 * size..(g0 + hi - lo) * size].copy_from_slice(&lbytes[(ls + lo) * size..(ls + hi) * size]);
            } else {
                for j in lo..hi {
                    scalar::write(gbytes, gt, gs.wrapping_add(j), scalar::read(lbytes, lt, ls + j));
                }
            }
        }
    });
}

/// The `rows × cols` matrix `op(x)` as row-major f32, where `x` is stored
/// row-major with rows of `stride` elements: `x` itself, or its transpose
/// when `trans` (then `x` is `cols × rows`).
fn decode_matrix(bytes: &[u8], t: DType, stride: usize, rows: usize, cols: usize, trans: bool) -> Vec<f32> {
    let stored: Vec<f32> = (0..rows * cols)
        .map(|i| match scalar::read(bytes, t, i) {
            Value::F16(h) => h.to_f32(),
            Value::BF16(h) => h.to_f32(),
            Value::F32(x) => x,
            other => match cast(other, DType::F32) {
                Value::F32(x) => x,
                _ => 0.0,
            },
        })
        .collect();
    if !trans {
        return stored;
    }
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            out[r * cols + c] = stored[c * stride + r];
        }
    }
    out
}

fn scope_word(s: Scope) -> &'static str {
    match s {
        Scope::Global => "tensor",
        Scope::Shared => "shared buffer",
        Scope::Fragment => "fragment",
        Scope::Local => "local buffer",
    }
}

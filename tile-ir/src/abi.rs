//! The launch contract shared by the GPU path and the interpreter: binding
//! dynamic dimensions from tensor shapes, evaluating the grid, and the
//! threadblock rasterization of `use_swizzle` ([`rasterize`], and the same
//! formula as IR expressions for the code generator, [`rasterize_exprs`]),
//! and grid folding: a grid past CUDA's per-axis limits launched on x and
//! unfolded in the kernel ([`folds_grid`], [`launch_shape`], [`unfold`]),
//! and which tensor parameters a kernel reads ([`reads_tensor`], what the
//! autotuner must save before it times a kernel on the caller's tensors).
//!
//! Expects a verified kernel. Guarantees that both execution paths see the
//! same dimension values and grid, and that every mismatch is reported with
//! the parameter and dimension it concerns.

use crate::ir::{BinOp, BufferId, Expr, Extent, Kernel, ParamKind, Stmt, StmtKind, UnOp, Value};

/// The PTX parameter of a variant with a dynamic tile scheduler
/// ([`takes_tile_counter`]): a `.u64` pointer to a 32-bit global counter,
/// after the launch ABI's other parameters and before the tensor maps. The
/// counter must read 0 when the launch starts and belong to that launch
/// alone while it runs (the runtime keeps one per stream and zeroes it on
/// that stream before each launch); a null pointer makes the variant take
/// its tiles by the static stride `ctaid.x + i·nctaid.x`.
pub const TILE_COUNTER_PARAM: &str = "tile_counter";

/// The schedule whose variants take the tile counter
/// ([`takes_tile_counter`]): the persistent warp-specialized loop's (the
/// schedule takes its name from here, so that this launch contract does not
/// depend on the schedules).
pub const TILE_COUNTER_SCHEDULE: &str = "warp_specialized_loop_persistent";

/// Whether variants of schedule `schedule` ([`crate::Compiled::schedule`])
/// take the tile counter [`TILE_COUNTER_PARAM`]: the persistent
/// warp-specialized loop's ([`TILE_COUNTER_SCHEDULE`]), whose producer takes
/// each block's next tile from it (`nctaid.x + atomicAdd(counter, 1)`, after
/// the block's first, `ctaid.x`).
pub fn takes_tile_counter(schedule: &str) -> bool {
    schedule == TILE_COUNTER_SCHEDULE
}

/// The parameter of a variant built with `CompileOptions::trace`
/// (`passes::trace`): a `u64` device pointer to
/// `TRACE_BLOCKS · TRACE_WARPGROUPS · TRACE_CAPACITY` zeroed words, after
/// the other parameters but the tensor maps (after the tile counter).
pub const TRACE_PARAM: &str = "tile_trace";
/// The blocks (the first, by linear block index) whose warpgroups record.
pub const TRACE_BLOCKS: i64 = 8;
/// The warpgroups per block with a slot (a block's later ones record nothing).
pub const TRACE_WARPGROUPS: i64 = 4;
/// The events a warpgroup's slot holds (the later ones are dropped).
pub const TRACE_CAPACITY: i64 = 4096;

/// Whether a variant's PTX takes the trace buffer [`TRACE_PARAM`].
pub fn takes_trace(ptx: &str) -> bool {
    ptx.contains(&format!(".param .u64 {TRACE_PARAM}"))
}

/// A tensor whose shape disagrees with the kernel's signature.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ShapeError {
    /// The parameter's name as written in the kernel.
    pub param: String,
    /// Which dimension (0-based), if the problem is one dimension.
    pub dim: Option<usize>,
    /// The whole message, naming the parameter and the expected and given shapes.
    pub message: String,
}

/// Binds every dynamic dimension from the tensor parameters' shapes.
///
/// `shapes[i]` is the shape of parameter `i` if it is a tensor (ignored for
/// scalars). Returns the value of each `kernel.dims[k]`, in that order.
pub fn bind_dims(kernel: &Kernel, shapes: &[Option<&[usize]>]) -> Result<Vec<i64>, ShapeError> {
    let mut values: Vec<Option<(i64, String, usize)>> = vec![None; kernel.dims.len()];
    for (param, shape) in kernel.params.iter().zip(shapes) {
        let ParamKind::Tensor(buf) = param.kind else { continue };
        let buffer = kernel.buffer(buf);
        let Some(shape) = shape else {
            return Err(ShapeError {
                param: param.name.clone(),
                dim: None,
                message: format!("parameter `{}` expects a tensor", param.name),
            });
        };
        if shape.len() != buffer.shape.len() {
            return Err(ShapeError {
                param: param.name.clone(),
                dim: None,
                message: format!(
                    "parameter `{}` expects a tensor of rank {} ({}), got shape {:?} (rank {})",
                    param.name,
                    buffer.shape.len(),
                    describe_shape(kernel, &buffer.shape),
                    shape,
                    shape.len()
                ),
            });
        }
        for (d, (extent, &actual)) in buffer.shape.iter().zip(shape.iter()).enumerate() {
            let actual = actual as i64;
            match *extent {
                Extent::Const(c) if c != actual => {
                    return Err(ShapeError {
                        param: param.name.clone(),
                        dim: Some(d),
                        message: format!(
                            "parameter `{}`: dimension {d} must be {c}, got {actual} (shape {:?})",
                            param.name, shape
                        ),
                    })
                }
                Extent::Const(_) => {}
                Extent::Dyn(v) => {
                    let k = kernel.dims.iter().position(|&x| x == v).expect("dim var listed in dims");
                    let name = &kernel.var(v).name;
                    if actual > i32::MAX as i64 {
                        return Err(ShapeError {
                            param: param.name.clone(),
                            dim: Some(d),
                            message: format!(
                                "parameter `{}`: dimension {d} (`{name}`) is {actual}, over the i32 limit",
                                param.name
                            ),
                        });
                    }
                    match &values[k] {
                        None => values[k] = Some((actual, param.name.clone(), d)),
                        Some((prev, p, pd)) if *prev != actual => {
                            return Err(ShapeError {
                                param: param.name.clone(),
                                dim: Some(d),
                                message: format!(
                                    "`{name}` is {prev} from dimension {pd} of `{p}` but {actual} from dimension {d} of `{}`",
                                    param.name
                                ),
                            })
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
    values
        .into_iter()
        .zip(&kernel.dims)
        .map(|(v, &var)| {
            v.map(|(x, _, _)| x).ok_or_else(|| ShapeError {
                param: String::new(),
                dim: None,
                message: format!("dimension `{}` is not bound by any tensor parameter", kernel.var(var).name),
            })
        })
        .collect()
}

fn describe_shape(kernel: &Kernel, shape: &[Extent]) -> String {
    let parts: Vec<String> = shape
        .iter()
        .map(|e| match e {
            Extent::Const(c) => c.to_string(),
            Extent::Dyn(v) => kernel.var(*v).name.clone(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// CUDA's limit on each axis of a launch (x, y, z).
pub const GRID_AXIS_LIMITS: [u32; 3] = [i32::MAX as u32, 65535, 65535];

/// Whether the compiled kernel derives its block indices from a linear
/// block id, so that the runtime may fold a grid whose y or z extent is
/// past [`GRID_AXIS_LIMITS`] onto x ([`launch_shape`]).
///
/// True when the y or z extent is not a compile-time constant within its
/// limit, unless the kernel asks for a thread block cluster (a cluster
/// fixes the launch's shape, so such a kernel keeps the per-axis limits).
/// A 1-D kernel, or one whose y and z extents are constants within the
/// limits, reads `ctaid` directly (the code it had before folding existed).
///
/// The kernel side (`passes/lower/setup.rs`): `linear = ctaid.x +
/// nctaid.x·(ctaid.y + nctaid.y·ctaid.z)` ([`linear_block_id`]), unfolded by
/// the grid's own extents ([`unfold`], [`unfold_exprs`]): right for the
/// plain launch `(gx, gy, gz)` and for the folded one `(gx·gy·gz, 1, 1)`.
pub fn folds_grid(kernel: &Kernel) -> bool {
    kernel.cluster == [1, 1, 1]
        && (1..3).any(|a| !matches!(const_extent(kernel, &kernel.grid[a]), Some(v) if (0..=i64::from(GRID_AXIS_LIMITS[a])).contains(&v)))
}

/// The value of a grid extent that uses no dimension, if it has one.
fn const_extent(kernel: &Kernel, e: &Expr) -> Option<i64> {
    fn closed(e: &Expr) -> bool {
        match e {
            Expr::Const(_) => true,
            Expr::Cast { arg, .. } | Expr::Unary { arg, .. } => closed(arg),
            Expr::Binary { lhs, rhs, .. } => closed(lhs) && closed(rhs),
            _ => false,
        }
    }
    closed(e).then(|| eval_host_int(kernel, e, &[]).ok()).flatten()
}

/// Evaluates the grid from the bound dimensions (`dims` as from [`bind_dims`]):
/// the user's grid, as the interpreter runs it ([`launch_shape`] says how
/// the GPU launches it). An extent of 0 (an empty tensor) is allowed: the
/// launch then does nothing. A negative extent, one past 2^31 − 1, a y or z
/// extent past 65,535 in a kernel that cannot fold its grid
/// ([`folds_grid`]: a clustered one), or, in one that can, more blocks in
/// all than 2^31 − 1 (the linear block id is 32-bit), is an error.
pub fn eval_grid(kernel: &Kernel, dims: &[i64]) -> Result<[u32; 3], String> {
    let mut out = [1u32; 3];
    for (axis, e) in kernel.grid.iter().enumerate() {
        let v = eval_host_int(kernel, e, dims)?;
        if v < 0 || v > i32::MAX as i64 {
            return Err(format!("grid extent {axis} evaluates to {v}, outside the launchable range"));
        }
        out[axis] = v as u32;
    }
    if folds_grid(kernel) {
        let total: u64 = out.iter().map(|&g| u64::from(g)).product();
        if total > i32::MAX as u64 {
            return Err(format!(
                "the grid {out:?} has {total} blocks, more than the 2147483647 (2^31 - 1) one launch can run; \
                 give each block more work (larger tiles) or split the launch"
            ));
        }
    } else {
        for axis in 1..3 {
            if out[axis] > GRID_AXIS_LIMITS[axis] {
                return Err(format!(
                    "grid extent {axis} evaluates to {}, past the {} blocks CUDA launches on {}, and a kernel with a \
                     thread block cluster cannot fold its grid onto x; put the large extent first in `grid(..)` \
                     (x takes up to 2^31 - 1 blocks)",
                    out[axis],
                    GRID_AXIS_LIMITS[axis],
                    ["x", "y", "z"][axis]
                ));
            }
        }
    }
    Ok(out)
}

/// The shape the GPU launches the grid `grid` (from [`eval_grid`]) with:
/// the grid itself when every axis is within [`GRID_AXIS_LIMITS`] (the
/// common case: the launch is exactly the user's), else, for a kernel that
/// folds ([`folds_grid`]; `eval_grid` refuses the others), every block on
/// x, `(gx·gy·gz, 1, 1)`, which `eval_grid` has checked fits.
pub fn launch_shape(kernel: &Kernel, grid: [u32; 3]) -> [u32; 3] {
    let within = (0..3).all(|a| grid[a] <= GRID_AXIS_LIMITS[a]);
    if within || !folds_grid(kernel) {
        return grid;
    }
    let total: u64 = grid.iter().map(|&g| u64::from(g)).product();
    [total.min(u64::from(GRID_AXIS_LIMITS[0])) as u32, 1, 1]
}

/// The linear id of block `ctaid` in a launch of shape `nctaid`:
/// `ctaid.x + nctaid.x·(ctaid.y + nctaid.y·ctaid.z)`, what a folding kernel
/// computes at entry ([`folds_grid`]).
pub fn linear_block_id(nctaid: [u32; 3], ctaid: [u32; 3]) -> u64 {
    let [nx, ny, _] = nctaid.map(u64::from);
    let [x, y, z] = ctaid.map(u64::from);
    x + nx * (y + ny * z)
}

/// The block `(bx, by, bz)` of the user's grid `grid` that linear block id
/// `linear` runs as: `bz = linear / (gx·gy)`, and within that plane
/// `linear % (gx·gy)` is x-major (`bx` fastest), or rasterized when the
/// kernel has `use_swizzle(panel)` ([`rasterize`]), the order the
/// interpreter runs blocks in. A bijection of `0..gx·gy·gz` onto the grid
/// (tested). An empty grid gives `(0, 0, 0)`.
pub fn unfold(rasterize_panel: Option<u32>, grid: [u32; 3], linear: u64) -> [u32; 3] {
    if grid.contains(&0) {
        return [0, 0, 0];
    }
    let plane = u64::from(grid[0]) * u64::from(grid[1]);
    let (lin, bz) = (linear % plane, (linear / plane) as u32);
    let (bx, by) = match rasterize_panel {
        Some(panel) => rasterize(panel, grid[0], grid[1], lin),
        None => ((lin % u64::from(grid[0])) as u32, (lin / u64::from(grid[0])) as u32),
    };
    [bx, by, bz]
}

/// [`unfold`] as `i32` IR expressions over the grid's extents and the
/// linear block id, for the code generator: returns `[bx, by, bz]`. When
/// `gz` is the constant 1 the z plane is skipped (`bz` is 0 and the plane's
/// id is `linear` itself, no division). `linear` is cloned into the result:
/// pass a variable. Valid while `gx·gy·gz` fits in `i32` ([`eval_grid`]
/// checks it for folding kernels).
pub fn unfold_exprs(rasterize_panel: Option<u32>, grid: &[Expr; 3], linear: &Expr) -> [Expr; 3] {
    let (gx, gy) = (&grid[0], &grid[1]);
    let (lin, bz) = if grid[2] == Expr::i32(1) {
        (linear.clone(), Expr::i32(0))
    } else {
        let plane = Expr::binary(BinOp::Mul, gx.clone(), gy.clone());
        (Expr::binary(BinOp::Rem, linear.clone(), plane.clone()), Expr::binary(BinOp::Div, linear.clone(), plane))
    };
    let (bx, by) = match rasterize_panel {
        Some(panel) => rasterize_exprs(panel, gx, gy, &lin),
        None => (Expr::binary(BinOp::Rem, lin.clone(), gx.clone()), Expr::binary(BinOp::Div, lin, gx.clone())),
    };
    [bx, by, bz]
}

/// Evaluates an integer expression over constants and dynamic dimensions.
pub fn eval_host_int(kernel: &Kernel, e: &Expr, dims: &[i64]) -> Result<i64, String> {
    let ev = |x: &Expr| eval_host_int(kernel, x, dims);
    Ok(match e {
        Expr::Const(Value::I32(v)) => *v as i64,
        Expr::Const(Value::U32(v)) => *v as i64,
        Expr::Const(Value::I64(v)) => *v,
        Expr::Var(v) => {
            let k = kernel.dims.iter().position(|x| x == v).ok_or_else(|| {
                format!("`{}` is not a dimension; the grid may use only dimensions and constants", kernel.var(*v).name)
            })?;
            dims[k]
        }
        Expr::Cast { arg, .. } => ev(arg)?,
        Expr::Unary { op: UnOp::Neg, arg } => -ev(arg)?,
        Expr::Binary { op, lhs, rhs } => {
            let (a, b) = (ev(lhs)?, ev(rhs)?);
            match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div | BinOp::Rem if b == 0 => return Err("division by zero in the grid".into()),
                BinOp::Div => a / b,
                BinOp::Rem => a % b,
                BinOp::Min => a.min(b),
                BinOp::Max => a.max(b),
                _ => return Err(format!("operator {op:?} is not allowed in the grid")),
            }
        }
        other => return Err(format!("expression {other:?} is not allowed in the grid")),
    })
}

/// Threadblock rasterization (`use_swizzle(panel)`, [`crate::ir::Kernel::rasterize`]):
/// the block `(bx, by)` that the block with hardware linear id
/// `linear = ctaid.y * gx + ctaid.x` runs as, on a `gx × gy` grid.
///
/// The grid is cut into panels of `panel` columns (the last one narrower when
/// `gx % panel != 0`); consecutive linear ids walk a panel row by row (across
/// its columns, then down), and the next panel starts when one is done. Blocks
/// that run at the same time then share rows of A (the same `by`) and columns
/// of B (the panel's few `bx`), which keeps both in L2.
///
/// A bijection of `0..gx*gy` onto the grid (tested). Expects
/// `linear < gx * gy`; a `panel` of 0 is read as 1 and a panel wider than the
/// grid as `gx`, so the function never panics (an out-of-range `linear` gives
/// a block outside the grid).
pub fn rasterize(panel: u32, gx: u32, gy: u32, linear: u64) -> (u32, u32) {
    if gx == 0 || gy == 0 {
        return (0, 0);
    }
    let p = u64::from(panel.clamp(1, gx));
    let (gx, gy) = (u64::from(gx), u64::from(gy));
    let panel_blocks = p * gy;
    let panel_index = linear / panel_blocks;
    let first_col = panel_index * p;
    let width = p.min(gx.saturating_sub(first_col)).max(1);
    let r = linear - panel_index * panel_blocks;
    ((first_col + r % width) as u32, (r / width) as u32)
}

/// [`rasterize`] as `i32` IR expressions over the grid extents and the linear
/// block id, for the code generator: returns `(bx, by)`. `gx`, `gy` and
/// `linear` are `i32` expressions (typically `nctaid.x`, `nctaid.y` and
/// `ctaid.y * nctaid.x + ctaid.x`); they are cloned into the result, so pass
/// variables rather than large trees. Valid while `gx * gy` fits in `i32`.
/// Uses only `+ - * / % min` on non-negative values (the same result as
/// [`rasterize`] for `1 <= panel`, tested by evaluating both).
pub fn rasterize_exprs(panel: u32, gx: &Expr, gy: &Expr, linear: &Expr) -> (Expr, Expr) {
    let p = Expr::i32(panel.clamp(1, i32::MAX as u32) as i32);
    // A panel wider than the grid is the whole grid: min(panel, gx).
    let p = Expr::binary(BinOp::Min, p, gx.clone());
    let panel_blocks = Expr::binary(BinOp::Mul, p.clone(), gy.clone());
    let panel_index = Expr::binary(BinOp::Div, linear.clone(), panel_blocks.clone());
    let first_col = Expr::binary(BinOp::Mul, panel_index, p.clone());
    let width = Expr::binary(BinOp::Min, p, Expr::binary(BinOp::Sub, gx.clone(), first_col.clone()));
    let r = Expr::binary(BinOp::Rem, linear.clone(), panel_blocks);
    let bx = Expr::binary(BinOp::Add, first_col, Expr::binary(BinOp::Rem, r.clone(), width.clone()));
    let by = Expr::binary(BinOp::Div, r, width);
    (bx, by)
}

/// The divisors a launch evaluates for the kernel, so that it divides by
/// multiplying: every `i32` expression the kernel divides by (`a / d`,
/// `a % d`) that reads dimensions and nothing else but `i32` constants
/// (GQA's `h / (H / HKV)` divides by `HKV` and by `H / HKV`), in the body and
/// in the block unfolding of its grid ([`unfold_exprs`], what a folded
/// launch and a persistent variant compute per block), each once, in the
/// order first met. A divisor that is a constant is not one (ptxas
/// multiplies by its own magic number).
///
/// Each takes the four `.u32` parameters of [`divisor_params`] after the
/// scalars (ARCHITECTURE.md, "Launch ABI"), whatever the variant: the GPU
/// path and the simulator pass them from [`divisor_args`], and the code
/// generator divides by them where [`crate::CompileOptions::fast_divisors`]
/// is on (`passes/lower/divide.rs`). The list is a function of the kernel
/// alone: the compiler computes it from the kernel it was given, before any
/// schedule rewrites the body.
pub fn dims_divisors(kernel: &Kernel) -> Vec<Expr> {
    fn dims_only(kernel: &Kernel, e: &Expr) -> bool {
        match e {
            Expr::Const(Value::I32(_)) => true,
            Expr::Var(v) => kernel.dims.contains(v) && kernel.var(*v).dtype == crate::ir::DType::I32,
            Expr::Unary { op: UnOp::Neg | UnOp::Not | UnOp::Abs, arg } => dims_only(kernel, arg),
            Expr::Binary { op, lhs, rhs } => {
                matches!(
                    op,
                    BinOp::Add
                        | BinOp::Sub
                        | BinOp::Mul
                        | BinOp::Div
                        | BinOp::Rem
                        | BinOp::Min
                        | BinOp::Max
                        | BinOp::And
                        | BinOp::Or
                        | BinOp::Xor
                ) && dims_only(kernel, lhs)
                    && dims_only(kernel, rhs)
            }
            _ => false,
        }
    }
    fn reads_a_dim(e: &Expr) -> bool {
        match e {
            Expr::Var(_) => true,
            Expr::Unary { arg, .. } => reads_a_dim(arg),
            Expr::Binary { lhs, rhs, .. } => reads_a_dim(lhs) || reads_a_dim(rhs),
            _ => false,
        }
    }
    fn visit(kernel: &Kernel, e: &Expr, out: &mut Vec<Expr>) {
        match e {
            Expr::Const(_) | Expr::Var(_) => {}
            Expr::Load { index, .. } => index.iter().for_each(|x| visit(kernel, x, out)),
            Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => visit(kernel, arg, out),
            Expr::Binary { op, lhs, rhs } => {
                visit(kernel, lhs, out);
                visit(kernel, rhs, out);
                let divides = matches!(op, BinOp::Div | BinOp::Rem);
                if divides && reads_a_dim(rhs) && dims_only(kernel, rhs) && !out.contains(rhs) {
                    out.push((**rhs).clone());
                }
            }
            Expr::Fma { a, b, c } => [a, b, c].iter().for_each(|x| visit(kernel, x, out)),
            Expr::Select { cond, then, otherwise } => {
                [cond, then, otherwise].iter().for_each(|x| visit(kernel, x, out))
            }
        }
    }
    fn stmts(kernel: &Kernel, body: &[Stmt], out: &mut Vec<Expr>) {
        for s in body {
            let mut e = |x: &Expr| visit(kernel, x, out);
            match &s.kind {
                StmtKind::Let { value, .. } | StmtKind::Assign { value, .. } | StmtKind::Fill { value, .. } => e(value),
                StmtKind::Store { index, value, .. } | StmtKind::AtomicAdd { index, value, .. } => {
                    index.iter().for_each(&mut e);
                    e(value);
                }
                StmtKind::For { start, end, body, .. } => {
                    e(start);
                    e(end);
                    stmts(kernel, body, out);
                }
                StmtKind::If { cond, then, otherwise } => {
                    e(cond);
                    stmts(kernel, then, out);
                    stmts(kernel, otherwise, out);
                }
                StmtKind::Copy { src, dst, fill, .. } => {
                    src.origin.iter().chain(&dst.origin).chain(fill).for_each(e);
                }
                StmtKind::Print { args, .. } => args.iter().for_each(e),
                StmtKind::Reduce { .. } | StmtKind::Gemm { .. } | StmtKind::Barrier => {}
            }
        }
    }
    let mut out = Vec::new();
    // The unfolding of the grid, over a stand-in for the linear block id
    // (never a dimension, so it is no divisor).
    if let Some(i) = kernel.vars.iter().position(|v| !matches!(v.kind, crate::ir::VarKind::Dim)) {
        let linear = Expr::Var(crate::ir::VarId(i as u32));
        for e in unfold_exprs(kernel.rasterize, &kernel.grid, &linear) {
            visit(kernel, &e, &mut out);
        }
    }
    stmts(kernel, &kernel.body, &mut out);
    out
}

/// The value of a divisor of [`dims_divisors`] at the bound dimensions
/// `dims` (as from [`bind_dims`]), as the kernel computes it: `i32`
/// wrapping arithmetic, a division by 0 giving 0.
pub fn eval_divisor(kernel: &Kernel, e: &Expr, dims: &[i64]) -> i32 {
    let ev = |x: &Expr| eval_divisor(kernel, x, dims);
    match e {
        Expr::Const(Value::I32(v)) => *v,
        Expr::Var(v) => kernel.dims.iter().position(|x| x == v).map_or(0, |k| dims[k] as i32),
        Expr::Unary { op: UnOp::Neg, arg } => ev(arg).wrapping_neg(),
        Expr::Unary { op: UnOp::Not, arg } => !ev(arg),
        Expr::Unary { op: UnOp::Abs, arg } => ev(arg).wrapping_abs(),
        Expr::Binary { op, lhs, rhs } => {
            let (a, b) = (ev(lhs), ev(rhs));
            match op {
                BinOp::Add => a.wrapping_add(b),
                BinOp::Sub => a.wrapping_sub(b),
                BinOp::Mul => a.wrapping_mul(b),
                BinOp::Div | BinOp::Rem if b == 0 => 0,
                BinOp::Div => a.wrapping_div(b),
                BinOp::Rem => a.wrapping_rem(b),
                BinOp::Min => a.min(b),
                BinOp::Max => a.max(b),
                BinOp::And => a & b,
                BinOp::Or => a | b,
                BinOp::Xor => a ^ b,
                _ => 0,
            }
        }
        _ => 0,
    }
}

/// The four `.u32` parameters that divide an `i32` by `d` with a multiply
/// (Granlund and Montgomery's round-up method, as CUTLASS's `FastDivmod`):
/// `[d, m, s1, s2]` with `l = ⌈log2 |d|⌉`, `m = ⌊2^32·(2^l − |d|)/|d|⌋ + 1`,
/// `s1 = min(l, 1)`, `s2 = max(l − 1, 0)`. The kernel computes, for
/// `a = |n|` as a `u32`, `t = mulhi(a, m)` and `q = (t + ((a − t) >> s1)) >> s2`,
/// which is `a / |d|` for every `a < 2^32` and `1 ≤ |d| < 2^32` (tested
/// against division), then gives `q` the sign of `n · d`: `n / d` rounded
/// toward zero, wrapping as `i32::wrapping_div`. A divisor of 0 gives
/// `m = 0`, `s1 = s2 = 0`: `q = |n|` with `n`'s sign (a division by zero's
/// result is unspecified on the GPU, as PTX's `div.s32`).
pub fn divisor_params(d: i32) -> [u32; 4] {
    let ad = d.unsigned_abs();
    if ad == 0 {
        return [0; 4];
    }
    let l = 32 - (ad - 1).leading_zeros();
    let m = ((1u128 << 32) * ((1u128 << l) - u128::from(ad)) / u128::from(ad) + 1) as u32;
    [d as u32, m, l.min(1), l.saturating_sub(1)]
}

/// The divisor parameters of a launch at the bound dimensions: the four
/// of [`divisor_params`] for each divisor of [`dims_divisors`], in order.
pub fn divisor_args(kernel: &Kernel, dims: &[i64]) -> Vec<u32> {
    dims_divisors(kernel).iter().flat_map(|e| divisor_params(eval_divisor(kernel, e, dims))).collect()
}

#[cfg(test)]
mod divisor_tests {
    use super::*;

    /// `q` as the kernel computes it from [`divisor_params`].
    fn divide(n: i32, p: [u32; 4]) -> i32 {
        let [d, m, s1, s2] = p;
        let a = n.unsigned_abs();
        let t = ((u64::from(a) * u64::from(m)) >> 32) as u32;
        let q = (t.wrapping_add(a.wrapping_sub(t) >> s1)) >> s2;
        let mask = (n >> 31) ^ ((d as i32) >> 31);
        ((q as i32) ^ mask).wrapping_sub(mask)
    }

    #[test]
    fn the_multiply_divides_like_division() {
        let mut state = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut divisors: Vec<i32> = (-70..=70).filter(|&d| d != 0).collect();
        divisors.extend([i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1, 1 << 30, (1 << 30) + 1, -(1 << 30) - 1]);
        divisors.extend((0..31).flat_map(|b| [1i32 << b, (1i32 << b).wrapping_add(1), (1i32 << b).wrapping_sub(1)]));
        for _ in 0..2000 {
            let r = next();
            divisors.push((r as i32) >> (r >> 59));
        }
        let mut dividends: Vec<i32> = vec![0, 1, -1, 2, -2, i32::MIN, i32::MAX, i32::MIN + 1, i32::MAX - 1];
        for _ in 0..200 {
            let r = next();
            dividends.push((r as i32) >> (r >> 59));
        }
        for &d in divisors.iter().filter(|&&d| d != 0) {
            let p = divisor_params(d);
            for &n in &dividends {
                assert_eq!(divide(n, p), n.wrapping_div(d), "{n} / {d}");
            }
            for n in [d, d.wrapping_sub(1), d.wrapping_add(1), d.wrapping_mul(7), d.wrapping_mul(7).wrapping_sub(1)] {
                assert_eq!(divide(n, p), n.wrapping_div(d), "{n} / {d}");
            }
        }
        // Every dividend of a few divisors whose magic is widest.
        for d in [3i32, 7, 641, 6_700_417, 1_000_000_007] {
            let p = divisor_params(d);
            for n in (i32::MIN..=i32::MAX).step_by(9_973) {
                assert_eq!(divide(n, p), n.wrapping_div(d), "{n} / {d}");
            }
        }
    }

    #[test]
    fn divisors_are_the_dims_only_ones_in_the_order_met() {
        let src = "kernel k<%0 H, %1 HKV, %2 S>(@0 t: &mut f32[S, H]) threads=32 grid=((S + 63) / 64, H, 1) {
  %3 bx = block_idx.x
  %4 hy = block_idx.y
  let %5 hk: i32 = hy / (H / HKV)
  let %6 r: i32 = (hy + 1) % HKV
  let %7 c: i32 = hy / 4
  let %8 e: i32 = hy / (hy + 1)
  t[bx, hk + r + c + e] = 1.0
}
";
        let k = crate::print::parse_kernel(src).unwrap();
        let got: Vec<String> = dims_divisors(&k).iter().map(|e| crate::print::print_expr(&k, e)).collect();
        // The grid's unfolding divides by gx = (S + 63) / 64 first.
        assert_eq!(got, vec!["(S + 63) / 64", "HKV", "H / HKV"]);
        let dims = [32, 8, 1000];
        let args = divisor_args(&k, &dims);
        assert_eq!(args.len(), 12);
        assert_eq!(args[0], 16);
        assert_eq!(args[4], 8);
        assert_eq!(args[8], 4);
    }
}

#[cfg(test)]
mod rasterize_tests {
    use super::*;
    use crate::ir::Kernel;

    /// Every linear id maps to a distinct block inside the grid, and each
    /// panel is walked row by row.
    #[test]
    fn rasterize_is_a_bijection_on_awkward_grids() {
        for gx in [1u32, 2, 3, 5, 7, 8, 13, 16, 31, 33] {
            for gy in [1u32, 2, 3, 4, 9, 17] {
                for panel in [1u32, 2, 3, 4, 5, 8, 16, 40] {
                    let n = u64::from(gx) * u64::from(gy);
                    let mut seen = vec![false; n as usize];
                    for l in 0..n {
                        let (bx, by) = rasterize(panel, gx, gy, l);
                        assert!(bx < gx && by < gy, "panel {panel} grid {gx}x{gy}: {l} -> ({bx}, {by})");
                        let i = (by * gx + bx) as usize;
                        assert!(!seen[i], "panel {panel} grid {gx}x{gy}: ({bx}, {by}) twice");
                        seen[i] = true;
                    }
                    // Panel structure, from an independent enumeration.
                    let p = panel.min(gx);
                    let mut order = Vec::new();
                    let mut c0 = 0;
                    while c0 < gx {
                        let w = p.min(gx - c0);
                        for y in 0..gy {
                            for x in c0..c0 + w {
                                order.push((x, y));
                            }
                        }
                        c0 += w;
                    }
                    let got: Vec<(u32, u32)> = (0..n).map(|l| rasterize(panel, gx, gy, l)).collect();
                    assert_eq!(got, order, "panel {panel} grid {gx}x{gy}");
                }
            }
        }
    }

    #[test]
    fn rasterize_exprs_agree_with_rasterize() {
        let k = Kernel::new("k", 32);
        let mut state = 0x2545f4914f6cdd1du64;
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let gx = (state % 50 + 1) as u32;
            let gy = ((state >> 8) % 40 + 1) as u32;
            let panel = ((state >> 16) % 12 + 1) as u32;
            let l = (state >> 24) % (u64::from(gx) * u64::from(gy));
            let (ex, ey) = rasterize_exprs(panel, &Expr::i32(gx as i32), &Expr::i32(gy as i32), &Expr::i32(l as i32));
            let got = (eval_host_int(&k, &ex, &[]).unwrap(), eval_host_int(&k, &ey, &[]).unwrap());
            let (bx, by) = rasterize(panel, gx, gy, l);
            assert_eq!(got, (i64::from(bx), i64::from(by)), "panel {panel} grid {gx}x{gy} linear {l}");
        }
    }

    #[test]
    fn rasterize_with_panel_one_is_column_major_and_wide_panel_row_major() {
        // panel = 1: down each column; panel >= gx: the hardware's row-major order.
        assert_eq!(rasterize(1, 3, 2, 1), (0, 1));
        assert_eq!(rasterize(1, 3, 2, 2), (1, 0));
        for l in 0..12 {
            assert_eq!(rasterize(8, 4, 3, l), ((l % 4) as u32, (l / 4) as u32));
        }
        assert_eq!(rasterize(0, 0, 5, 0), (0, 0));
    }
}

#[cfg(test)]
mod fold_tests {
    use super::*;
    use crate::ir::{DType, Var, VarId, VarKind};

    /// A kernel with grid `(R, dynamic, z)`: one dynamic dim `n` as y.
    fn kernel_with_grid(z: Expr) -> Kernel {
        let mut k = Kernel::new("k", 32);
        k.vars.push(Var { name: "n".into(), dtype: DType::I32, kind: VarKind::Dim });
        k.dims.push(VarId(0));
        k.grid = [Expr::i32(3), Expr::Var(VarId(0)), z];
        k
    }

    /// Both launch shapes (the user's grid, and the one `launch_shape`
    /// picks) run every block of the grid exactly once: the kernel's
    /// unfolding of the launch's linear id is a bijection onto the grid.
    #[test]
    fn unfold_of_either_launch_shape_is_a_bijection_on_awkward_grids() {
        let k = kernel_with_grid(Expr::Var(VarId(0)));
        let grids: &[[u32; 3]] = &[
            [1, 1, 1],
            [3, 5, 7],
            [7, 1, 3],
            [1, 65535, 1],
            [3, 65536, 1],
            [2, 70000, 1],
            [1, 70001, 2],
            [5, 3, 65537],
            [1, 2, 70000],
            [13, 1, 1],
        ];
        for &grid in grids {
            for panel in [None, Some(1), Some(2), Some(3), Some(8)] {
                let folded = launch_shape(&k, grid);
                let within = (0..3).all(|a| grid[a] <= GRID_AXIS_LIMITS[a]);
                assert_eq!(folded == grid, within, "grid {grid:?} launched as {folded:?}");
                assert!((0..3).all(|a| folded[a] <= GRID_AXIS_LIMITS[a]), "{folded:?}");
                for shape in [grid, folded] {
                    let n = grid.iter().map(|&g| g as usize).product::<usize>();
                    assert_eq!(shape.iter().map(|&g| g as usize).product::<usize>(), n, "{shape:?}");
                    let mut seen = vec![false; n];
                    for z in 0..shape[2] {
                        for y in 0..shape[1] {
                            for x in 0..shape[0] {
                                let l = linear_block_id(shape, [x, y, z]);
                                let [bx, by, bz] = unfold(panel, grid, l);
                                assert!(bx < grid[0] && by < grid[1] && bz < grid[2], "{grid:?} {shape:?}: {l}");
                                let i =
                                    ((bz as usize * grid[1] as usize) + by as usize) * grid[0] as usize + bx as usize;
                                assert!(
                                    !seen[i],
                                    "grid {grid:?} shape {shape:?} panel {panel:?}: ({bx}, {by}, {bz}) twice"
                                );
                                seen[i] = true;
                            }
                        }
                    }
                    // The plain launch without rasterization is the identity.
                    if shape == grid && panel.is_none() {
                        let c = [grid[0] - 1, grid[1] / 2, grid[2] - 1];
                        assert_eq!(unfold(None, grid, linear_block_id(grid, c)), c);
                    }
                }
            }
        }
    }

    #[test]
    fn unfold_exprs_agree_with_unfold() {
        let k = Kernel::new("k", 32);
        let mut state = 0x9e3779b97f4a7c15u64;
        for i in 0..3000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let g = [
                (state % 37 + 1) as u32,
                ((state >> 8) % 90_000 + 1) as u32,
                if i % 2 == 0 { 1 } else { ((state >> 24) % 5 + 1) as u32 },
            ];
            let total = g.iter().map(|&x| u64::from(x)).product::<u64>();
            let l = (state >> 32) % total;
            let panel = [None, Some(1), Some(4), Some(7)][(state >> 40) as usize % 4];
            let ge = g.map(|x| Expr::i32(x as i32));
            let got = unfold_exprs(panel, &ge, &Expr::i32(l as i32)).map(|e| eval_host_int(&k, &e, &[]).unwrap());
            assert_eq!(got, unfold(panel, g, l).map(i64::from), "grid {g:?} linear {l} panel {panel:?}");
        }
    }

    #[test]
    fn only_grids_that_may_pass_a_limit_fold_and_clusters_keep_the_limit() {
        let mut k = Kernel::new("k", 32);
        assert!(!folds_grid(&k));
        k.grid = [Expr::i32(100_000), Expr::i32(65535), Expr::i32(2)];
        assert!(!folds_grid(&k), "constant y/z within the limit: plain ctaid");
        assert_eq!(eval_grid(&k, &[]), Ok([100_000, 65535, 2]));
        k.grid[1] = Expr::i32(70000);
        assert!(folds_grid(&k));
        assert_eq!(launch_shape(&k, [1, 70000, 1]), [70000, 1, 1]);
        let mut k = kernel_with_grid(Expr::i32(1));
        assert!(folds_grid(&k));
        assert_eq!(eval_grid(&k, &[70000]), Ok([3, 70000, 1]));
        assert_eq!(launch_shape(&k, [3, 70000, 1]), [210000, 1, 1]);
        assert_eq!(launch_shape(&k, [3, 65535, 1]), [3, 65535, 1], "folds only past the limit");
        // More blocks than a 32-bit linear id counts.
        k.grid[0] = Expr::i32(1 << 20);
        let e = eval_grid(&k, &[1 << 12]).unwrap_err();
        assert!(e.contains("4294967296 blocks") && e.contains("2^31 - 1"), "{e}");
        // A cluster fixes the launch shape: the per-axis limit stays, with a way out.
        let mut k = kernel_with_grid(Expr::i32(1));
        k.cluster = [2, 1, 1];
        assert!(!folds_grid(&k));
        assert_eq!(eval_grid(&k, &[65535]), Ok([3, 65535, 1]));
        let e = eval_grid(&k, &[70000]).unwrap_err();
        assert!(e.contains("70000") && e.contains("cluster") && e.contains("put the large extent first"), "{e}");
    }
}

/// One TMA tensor map a compiled kernel takes by value (ARCHITECTURE.md,
/// "Launch ABI"): the runtime encodes it at launch from the tensor argument
/// `kernel.params[tensor]` (its device address, shape and row-major
/// strides) with this box and swizzle, elements outside the tensor reading
/// as zero, and passes it after every other parameter, in list order.
///
/// A compiled variant with tensor maps runs only when every mapped tensor
/// is TMA-addressable ([`tma_addressable`]); otherwise the runtime takes
/// the next variant of the same target (the last one has no maps).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapUse {
    /// The PTX parameter name (`.param .align 64 .b8 <param>[128]`).
    pub param: String,
    /// Index into `kernel.params` of the tensor parameter it maps.
    pub tensor: usize,
    /// Box extents in elements, outermost first (the tensor's dim order).
    pub box_shape: Vec<u32>,
    /// Swizzle span of the box in shared memory.
    pub swizzle: crate::hopper::Swizzle,
}

/// Whether a dense row-major tensor of `shape` with `elem`-byte elements at
/// device address `address` can be read through a TMA tensor map: the
/// address 16-byte aligned, every row stride (the bytes of all but the
/// outermost dims' inner extents) a multiple of 16 bytes below 2^40, at
/// most 5 dims, each extent in 1..=2^32.
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
pub fn tma_addressable(address: u64, shape: &[usize], elem: usize) -> bool {
    if address % 16 != 0 || shape.is_empty() || shape.len() > 5 {
        return false;
    }
    if shape.iter().any(|&d| d == 0 || d as u64 > 1 << 32) {
        return false;
    }
    let mut stride = elem as u64;
    for &d in shape.iter().rev().take(shape.len() - 1) {
        stride *= d as u64;
        if stride % 16 != 0 || stride >= 1 << 40 {
            return false;
        }
    }
    true
}

/// For each parameter (in `kernel.params` order), whether the kernel may
/// read the contents of that tensor: an element load of it (`Expr::Load`),
/// a copy from it, or an `atomic_add` into it (a read-modify-write). A
/// scalar parameter is `false`. The rule is syntactic and conservative: a
/// read anywhere in the body counts, whether or not it runs, and a read
/// after the kernel's own write still counts.
///
/// The autotuner launches each candidate several times on the caller's
/// tensors: a `&mut` tensor this says `true` for (an accumulating output)
/// is saved before timing and restored before the real launch; one that is
/// only written is left as the candidates wrote it (the real launch writes
/// it again).
pub fn reads_tensor(kernel: &Kernel) -> Vec<bool> {
    let mut read: Vec<BufferId> = Vec::new();
    stmts_read(&kernel.body, &mut read);
    kernel
        .params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Tensor(b) => read.contains(&b),
            ParamKind::Scalar(_) => false,
        })
        .collect()
}

fn stmts_read(body: &[Stmt], out: &mut Vec<BufferId>) {
    for s in body {
        match &s.kind {
            StmtKind::Let { value, .. } | StmtKind::Assign { value, .. } => value.collect_loads(out),
            StmtKind::Store { index, value, .. } => {
                index.iter().for_each(|e| e.collect_loads(out));
                value.collect_loads(out);
            }
            StmtKind::For { start, end, body, .. } => {
                start.collect_loads(out);
                end.collect_loads(out);
                stmts_read(body, out);
            }
            StmtKind::If { cond, then, otherwise } => {
                cond.collect_loads(out);
                stmts_read(then, out);
                stmts_read(otherwise, out);
            }
            StmtKind::Copy { src, dst, fill, .. } => {
                out.push(src.buf);
                src.origin.iter().chain(&dst.origin).chain(fill).for_each(|e| e.collect_loads(out));
            }
            StmtKind::Fill { value, .. } => value.collect_loads(out),
            StmtKind::Reduce { src, .. } => out.push(*src),
            StmtKind::Gemm { a, b, .. } => out.extend([*a, *b]),
            StmtKind::AtomicAdd { buf, index, value } => {
                out.push(*buf);
                index.iter().for_each(|e| e.collect_loads(out));
                value.collect_loads(out);
            }
            StmtKind::Print { args, .. } => args.iter().for_each(|e| e.collect_loads(out)),
            StmtKind::Barrier => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reads_tensor;
    use crate::print::parse_kernel;

    #[test]
    fn reads_of_tensor_params() {
        // `c` is only written; `a` and `b` are read by copies.
        let add = "kernel add<%0 N>(@0 a: &f32[N], @1 b: &f32[N], @2 c: &mut f32[N]) threads=128 grid=((N + (256 - 1)) / 256, 1, 1) {
  %1 bx = block_idx.x
  @3 x: fragment f32[256]
  @4 y: fragment f32[256]
  copy a[bx * 256] -> x
  copy b[bx * 256] -> y
  for %2 i in parallel 0..256 {
    x[i] = x[i] + y[i]
  }
  copy x -> c[bx * 256]
}
";
        assert_eq!(reads_tensor(&parse_kernel(add).unwrap()), vec![true, true, false]);
        // An accumulating output (`c += ..` through a copy in, and an
        // `atomic_add` into `t`) is read; the scalar is not.
        let acc = add.replace("copy b[bx * 256] -> y", "copy c[bx * 256] -> y");
        assert_eq!(reads_tensor(&parse_kernel(&acc).unwrap()), vec![true, false, true]);
        let atomic = "kernel all<%0 N>(@0 t: &mut i32[N, 4], %1 alpha: f32) threads=64 grid=(N, 1, 1) {
  for %2 i in 0..4 {
    atomic_add t[i, 0], 1
  }
}
";
        assert_eq!(reads_tensor(&parse_kernel(atomic).unwrap()), vec![true, false]);
        // A load of an element in an expression.
        let load = "kernel ld<%0 N>(@0 t: &mut f32[N], @1 u: &mut f32[N]) threads=32 grid=(1, 1, 1) {
  t[0] = u[1] + 1.0
}
";
        assert_eq!(reads_tensor(&parse_kernel(load).unwrap()), vec![false, true]);
    }
}

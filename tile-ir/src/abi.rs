//! The launch contract shared by the GPU path and the interpreter: binding
//! dynamic dimensions from tensor shapes, and evaluating the grid.
//!
//! Expects a verified kernel. Guarantees that both execution paths see the
//! same dimension values and grid, and that every mismatch is reported with
//! the parameter and dimension it concerns.

use crate::ir::{BinOp, Expr, Extent, Kernel, ParamKind, UnOp, Value};

/// A tensor whose shape disagrees with the kernel's signature.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ShapeError {
    /// The parameter's name as written in the kernel.
    pub param: String,
    /// Which dimension (0-based), if the problem is one dimension.
    pub dim: Option<usize>,
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

/// Evaluates the grid from the bound dimensions (`dims` as from [`bind_dims`]).
/// An extent of 0 (an empty tensor) is allowed: the launch then does nothing.
/// A negative extent, or one over the hardware limit, is an error.
pub fn eval_grid(kernel: &Kernel, dims: &[i64]) -> Result<[u32; 3], String> {
    let mut out = [1u32; 3];
    for (axis, e) in kernel.grid.iter().enumerate() {
        let v = eval_host_int(kernel, e, dims)?;
        if v < 0 || v > if axis == 0 { i32::MAX as i64 } else { 65535 } {
            return Err(format!("grid extent {axis} evaluates to {v}, outside the launchable range"));
        }
        out[axis] = v as u32;
    }
    Ok(out)
}

/// Evaluates an integer expression over constants and dynamic dimensions.
pub fn eval_host_int(kernel: &Kernel, e: &Expr, dims: &[i64]) -> Result<i64, String> {
    let ev = |x: &Expr| eval_host_int(kernel, x, dims);
    Ok(match e {
        Expr::Const(Value::I32(v)) => *v as i64,
        Expr::Const(Value::U32(v)) => *v as i64,
        Expr::Const(Value::I64(v)) => *v,
        Expr::Var(v) => {
            let k = kernel
                .dims
                .iter()
                .position(|x| x == v)
                .ok_or_else(|| format!("`{}` is not a dimension; the grid may use only dimensions and constants", kernel.var(*v).name))?;
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

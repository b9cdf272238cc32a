//! The CPU interpreter (placeholder: API only).
use crate::ir::{Kernel, Value};

/// The bytes of one tensor argument: little-endian elements of its dtype, row-major.
pub enum TensorData<'a> {
    Ro(&'a [u8]),
    Rw(&'a mut [u8]),
}

/// One kernel argument, in `kernel.params` order.
pub enum Arg<'a> {
    Tensor { data: TensorData<'a>, shape: Vec<usize> },
    Scalar(Value),
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("interpreter: {0}")]
pub struct InterpError(pub String);

/// Runs every block of the grid. `dims` are the values of `kernel.dims`.
pub fn run(_kernel: &Kernel, _args: &mut [Arg<'_>], _dims: &[i64], _grid: [u32; 3]) -> Result<(), InterpError> {
    Err(InterpError("the interpreter is not built yet".into()))
}

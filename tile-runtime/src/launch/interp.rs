//! The interpreter path: runs a kernel on the CPU (`tile_ir::interp`) over
//! the arguments' host bytes.
//!
//! Expects checked arguments (`args.rs`), bound dimensions and a non-empty
//! grid. Guarantees: the kernel runs to completion before this returns;
//! a tensor on a GPU is an [`Error::DeviceMismatch`], an interpreter error
//! or panic an [`Error::Interpreter`] naming the kernel (a bug in the
//! interpreter never takes the caller down). The kernel's cluster is
//! ignored: it never changes what a kernel computes. `TILE_INTERPRET_CHECK=1`
//! runs it in check mode (`tile_ir::interp::Options::check`).

use std::panic::{catch_unwind, AssertUnwindSafe};

use tile_ir::interp::{Arg as InterpArg, TensorData};
use tile_ir::Kernel;

use super::args::KernelArg;
use crate::error::{Error, Result};
use crate::tensor::Storage;

pub(super) fn launch_interpreter(k: &Kernel, args: &mut [KernelArg<'_>], dims: &[i64], grid: [u32; 3]) -> Result<()> {
    let mut interp_args: Vec<InterpArg<'_>> = Vec::with_capacity(args.len());
    for arg in args.iter_mut() {
        interp_args.push(match arg {
            KernelArg::Tensor(t) => match &t.storage {
                Storage::Host(bytes) => InterpArg::Tensor { data: TensorData::Ro(bytes), shape: t.shape.clone() },
                Storage::Cuda { .. } => return Err(Error::DeviceMismatch(format!("a tensor of kernel `{}`", k.name))),
            },
            KernelArg::Reshaped(facts, t) => match &t.storage {
                Storage::Host(bytes) => InterpArg::Tensor { data: TensorData::Ro(bytes), shape: facts.shape.clone() },
                Storage::Cuda { .. } => return Err(Error::DeviceMismatch(format!("a tensor of kernel `{}`", k.name))),
            },
            KernelArg::TensorMut(t) => {
                let shape = t.shape.clone();
                match &mut t.storage {
                    Storage::Host(bytes) => InterpArg::Tensor { data: TensorData::Rw(bytes), shape },
                    Storage::Cuda { .. } => {
                        return Err(Error::DeviceMismatch(format!("a tensor of kernel `{}`", k.name)))
                    }
                }
            }
            // Views borrow GPU memory (cudarc slices): never the interpreter's.
            KernelArg::View(..) | KernelArg::ViewMut(..) => {
                return Err(Error::DeviceMismatch(format!("a tensor view of kernel `{}`", k.name)))
            }
            other => InterpArg::Scalar(other.scalar().expect("tensor arguments are handled above")),
        });
    }
    // The interpreter is ordinary code; a bug in it must not take the caller down.
    let check = std::env::var(crate::device::INTERPRET_CHECK_ENV).is_ok_and(|v| v == "1");
    let options = tile_ir::interp::Options { check };
    let outcome =
        catch_unwind(AssertUnwindSafe(|| tile_ir::interp::run_with(k, &mut interp_args, dims, grid, options)));
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Interpreter(format!("kernel `{}`: {e}", k.name))),
        Err(_) => Err(Error::Interpreter(format!(
            "kernel `{}`: the interpreter panicked (a bug in tile; please report it with the kernel)",
            k.name
        ))),
    }
}

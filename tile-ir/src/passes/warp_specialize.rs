//! Warp specialization of pipelined GEMM loops on sm_90a (stub; filled in below).
use crate::compile::{CompileOptions, Compiled};
use crate::ir::Kernel;
use crate::{CompileError, Target};

/// The warp-specialized TMA + wgmma variant of `kernel`, or `None` when the
/// kernel does not have the shape this pass takes.
pub fn compile(_kernel: &Kernel, _target: Target, _options: CompileOptions) -> Option<Result<Compiled, Vec<CompileError>>> {
    None
}

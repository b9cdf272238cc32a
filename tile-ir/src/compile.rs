//! The pass pipeline, in order, in one place (placeholder: API only).
use crate::{ir::Kernel, CompileError, Target};

/// The result of compiling one kernel for one target.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub target: Target,
    /// PTX text for the whole module (one `.entry`).
    pub ptx: String,
    /// Dynamic shared memory the kernel needs at launch, in bytes.
    pub shared_bytes: u32,
    /// The Thread IR in its text form (for `TILE_DUMP`).
    pub thread_ir: String,
}

/// Compiles a verified kernel for one target.
pub fn compile(kernel: &Kernel, target: Target) -> Result<Compiled, Vec<CompileError>> {
    let _ = (kernel, target);
    Err(vec![CompileError::new(crate::ir::SpanId::NONE, "code generation is not built yet")])
}

//! The verifier (placeholder: owned by the interpreter/verifier work).
use crate::{ir::Kernel, CompileError};

/// Checks every invariant listed in [`crate::ir`]'s module doc.
pub fn verify(_kernel: &Kernel) -> Result<(), Vec<CompileError>> {
    Ok(())
}

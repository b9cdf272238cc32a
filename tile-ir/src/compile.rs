//! The pass pipeline, in order, in one place (see [`crate::passes`]).
//!
//! Expects a kernel as the frontend builds it; verifies it first. Guarantees
//! PTX for the requested target or a list of errors located at the
//! statements they concern; never panics on a kernel it cannot lower.

use crate::ir::{Kernel, SpanId};
use crate::passes::{barriers, layout_infer, lower};
use crate::{thread_ir, CompileError, Target};

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
    /// The layout chosen for each fragment, and for each shared buffer whose
    /// layout is not row-major (prefixed `shared`), by name (for dumps and tests).
    pub layouts: Vec<(String, String)>,
    /// The Thread IR itself (for later passes, simulators and tests).
    pub function: thread_ir::Function,
}

/// Compiles a kernel for one target.
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
pub fn compile(kernel: &Kernel, target: Target) -> Result<Compiled, Vec<CompileError>> {
    crate::verify::verify(kernel)?;
    compile_verified(kernel, target)
}

/// Compiles a kernel that the caller has verified (or built by hand with
/// statements the verifier does not know yet): every pass after `verify`.
/// The passes still report what they cannot lower as errors.
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
pub fn compile_verified(kernel: &Kernel, target: Target) -> Result<Compiled, Vec<CompileError>> {
    if kernel.threads == 0 || kernel.threads % 32 != 0 || kernel.threads > 1024 {
        return Err(vec![CompileError::new(
            SpanId::NONE,
            format!("threads = {} must be a multiple of 32 between 32 and 1024", kernel.threads),
        )]);
    }
    let plan = layout_infer::infer_layouts(kernel)?;
    let mut func = lower::lower(kernel, target, &plan)?;
    barriers::insert_barriers(&mut func.body);
    // Dynamic shared memory a block may opt into: A100 (sm_80) 163 KB, H100/H200 227 KB.
    let limit = match target {
        Target::Sm80 => 166_912,
        Target::Sm90a => 232_448,
    };
    if func.shared_bytes > limit {
        return Err(vec![CompileError::new(
            SpanId::NONE,
            format!(
                "kernel `{}` needs {} bytes of shared memory, more than the {} bytes a block can have on {}",
                kernel.name,
                func.shared_bytes,
                limit,
                target.name()
            ),
        )]);
    }
    let ptx = crate::ptx::try_emit(&func, target).map_err(|e| vec![e])?;
    let mut layouts: Vec<(String, String)> =
        plan.frags.iter().map(|(b, l)| (kernel.buffer(*b).name.clone(), l.describe())).collect();
    layouts.extend(plan.shared.iter().map(|(b, l)| (kernel.buffer(*b).name.clone(), format!("shared {}", l.describe()))));
    layouts.sort();
    let thread_ir = thread_ir::print_function(&func);
    Ok(Compiled { target, ptx, shared_bytes: func.shared_bytes, thread_ir, layouts, function: func })
}

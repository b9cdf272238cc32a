//! The driver: verification, then the schedules ([`crate::schedule`]) in
//! their order of preference, each running the passes (see [`crate::passes`]).
//!
//! Expects a kernel as the frontend builds it; verifies it first. Guarantees
//! PTX for the requested target or a list of errors located at the
//! statements they concern; never panics on a kernel it cannot lower.

pub use crate::compiled::{CompileOptions, Compiled};
use crate::ir::Kernel;
use crate::schedule::{general, tma_copy, Schedule};
use crate::{CompileError, Target};

/// Compiles a kernel for one target.
pub fn compile(kernel: &Kernel, target: Target) -> Result<Compiled, Vec<CompileError>> {
    compile_with(kernel, target, CompileOptions::default())
}

/// Every variant of a kernel for one target, preferred first: the
/// schedules of [`Schedule::PREFERENCE`] that apply, in that order
/// ([`Compiled::schedule`] names each). Those that need TMA-addressable
/// tensors ([`Schedule::needs_tma`]: on sm_90a the warp-specialized GEMM,
/// then the TMA-copy variant, which is tried whatever
/// [`CompileOptions::tma_copies`] says) are added when they compile; a
/// failure there leaves the others alone. The first schedule that runs on
/// any tensors (the cp.async pipeline when the kernel has a loop it takes,
/// else the general one) ends the list, and its errors are the kernel's.
/// The runtime launches the first variant whose requirements the arguments
/// meet.
pub fn compile_variants(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
) -> Result<Vec<Compiled>, Vec<CompileError>> {
    crate::verify::verify(kernel)?;
    let mut out = Vec::new();
    for schedule in Schedule::PREFERENCE {
        let Ok(plan) = schedule.plan(kernel, target, options) else { continue };
        if schedule.needs_tma() {
            if let Ok(variant) = plan.compile(kernel, target, options) {
                out.push(variant);
            }
        } else {
            out.push(plan.compile(kernel, target, options)?);
            break;
        }
    }
    Ok(out)
}

/// Compiles a kernel for one target with explicit [`CompileOptions`].
pub fn compile_with(kernel: &Kernel, target: Target, options: CompileOptions) -> Result<Compiled, Vec<CompileError>> {
    crate::verify::verify(kernel)?;
    compile_verified_with(kernel, target, options)
}

/// Compiles a kernel that the caller has verified (or built by hand with
/// statements the verifier does not know yet): every pass after `verify`.
/// The passes still report what they cannot lower as errors.
pub fn compile_verified(kernel: &Kernel, target: Target) -> Result<Compiled, Vec<CompileError>> {
    compile_verified_with(kernel, target, CompileOptions::default())
}

/// [`compile_verified`] with explicit [`CompileOptions`]: the general
/// schedule ([`general::compile`]), or with [`CompileOptions::tma_copies`]
/// its TMA pipelined copies where it can ([`tma_copy::compile_where_possible`]).
pub fn compile_verified_with(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
) -> Result<Compiled, Vec<CompileError>> {
    if options.tma_copies {
        tma_copy::compile_where_possible(kernel, target, options)
    } else {
        general::compile(kernel, target, options)
    }
}

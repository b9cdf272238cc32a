//! The tile compiler.
//!
//! Architecture invariant: this crate knows nothing of syn, proc macros or
//! CUDA. It takes a [`ir::Kernel`] (built by the `#[tile_kernel]` frontend,
//! by hand in tests, or deserialized from JSON) and produces PTX text per
//! target, or executes the kernel on the CPU ([`interp`]).
//!
//! Data flows one way: Tile IR → [`verify`] → a schedule ([`schedule`]:
//! layout inference, the lowering core with the schedule's hooks) → Thread
//! IR → the back end (`compiled::finish`) → PTX. The driver
//! ([`mod@compile`]) walks the schedules in their order of preference; the
//! passes are listed in [`passes`].

pub mod abi;
pub mod compile;
pub mod compiled;
pub mod hopper;
pub mod interp;
pub mod ir;
pub mod layout;
pub mod passes;
pub mod print;
pub mod ptx;
pub mod schedule;
pub mod thread_ir;
pub mod verify;

pub use compile::{
    compile, compile_variants, compile_verified, compile_verified_with, compile_with, CompileOptions, Compiled,
};
pub use ir::*;
pub use schedule::{NotApplicable, Schedule};

/// A code-generation target.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Ampere and later: mma.sync, cp.async, ldmatrix.
    Sm80,
    /// Hopper with the arch-specific features (wgmma, setmaxnreg, TMA).
    Sm90a,
}

impl Target {
    /// The `.target` name: `sm_80`, `sm_90a`.
    pub fn name(self) -> &'static str {
        match self {
            Target::Sm80 => "sm_80",
            Target::Sm90a => "sm_90a",
        }
    }
    pub fn from_name(name: &str) -> Option<Target> {
        match name.trim() {
            "sm_80" => Some(Target::Sm80),
            "sm_90a" => Some(Target::Sm90a),
            _ => None,
        }
    }
    /// Compute capability as major*10+minor (80, 90).
    pub fn compute_capability(self) -> u32 {
        match self {
            Target::Sm80 => 80,
            Target::Sm90a => 90,
        }
    }
}

/// A problem found in a kernel, located at the statement or buffer it concerns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    pub span: ir::SpanId,
    pub message: String,
}

impl CompileError {
    pub fn new(span: ir::SpanId, message: impl Into<String>) -> CompileError {
        CompileError { span, message: message.into() }
    }
}

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

#![warn(missing_docs)]

pub mod abi;
pub mod compile;
pub mod compiled;
pub mod hopper;
pub mod interp;
pub mod ir;
pub mod layout;
pub mod passes;
pub mod print;
pub mod print_format;
pub mod ptx;
pub mod schedule;
pub mod target;
pub mod thread_ir;
pub mod verify;

pub use compile::{
    compile, compile_variants, compile_verified, compile_verified_with, compile_with, CompileOptions, Compiled,
};
pub use ir::*;
pub use schedule::{NotApplicable, Schedule};
pub use target::Target;

/// A problem found in a kernel, located at the statement or buffer it concerns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    /// Where: the statement's or buffer's span ([`ir::SpanId::NONE`] when the
    /// problem is the kernel as a whole, or the IR was built by hand).
    pub span: ir::SpanId,
    /// What is wrong, in words a user can act on.
    pub message: String,
}

impl CompileError {
    /// An error at `span`.
    pub fn new(span: ir::SpanId, message: impl Into<String>) -> CompileError {
        CompileError { span, message: message.into() }
    }
}

//! tile: a tile-level GPU kernel language for Rust.
//!
//! Write a kernel as a Rust function under [`tile_kernel`]; `cargo build`
//! compiles it to PTX and generates a typed `launch` wrapper. Kernels run on
//! an NVIDIA GPU (the driver is loaded at run time) or on the CPU interpreter
//! ([`Device::interpreter`], or `TILE_INTERPRET=1` with [`Device::auto`]).
//!
//! ```ignore
//! use tile::prelude::*;
//!
//! let device = Device::auto()?;
//! let stream = device.stream()?;
//! let a = DeviceTensor::from_slice(&stream, &a_host, &[n])?;
//! let b = DeviceTensor::from_slice(&stream, &b_host, &[n])?;
//! let mut c = DeviceTensor::<f32>::zeros(&stream, &[n])?;
//! vector_add::launch(&stream, &a, &b, &mut c)?;
//! let c_host = c.to_vec(&stream)?;
//! ```
//!
//! Besides [`dsl`] (the kernel language's reference, item by item), this
//! crate only re-exports: the compiler is `tile-ir`, the macro
//! `tile-macros`, the runtime `tile-runtime`.
#![warn(missing_docs)]

pub use tile_macros::tile_kernel;
pub use tile_runtime::{
    assert_close, bench, bf16, cudarc, f16, rel_error, BenchResult, Device, DeviceTensor, Element, Error, Event,
    KernelMeta, KernelTarget, ModuleSource, Reshaped, Result, Stream, TensorArg, TensorArgMut, TensorMapMeta,
    TensorView, TensorViewMut, INTERPRET_CHECK_ENV, INTERPRET_ENV,
};

/// Runs `f` with the lines that kernels' `print(..)`s write in the
/// interpreter on this thread collected into the returned string instead of
/// stderr (on a GPU, prints go to the process's stdout through `vprintf`).
pub use tile_ir::interp::capture_prints;

pub mod dsl;

/// The Tile IR and compiler, for tools and tests that build kernels by hand.
pub use tile_ir as ir;

/// The autotuner: the runtime side of `tune(..)` (see `tile_kernel`, "Autotuning").
pub use tile_runtime::tune;

/// cuBLAS as a peer for checking and benchmarking kernels (row-major f16/bf16 GEMM).
pub use tile_runtime::cublas;

/// Launching kernels on candle's CUDA tensors (feature `candle`).
#[cfg(feature = "candle")]
pub mod candle;

/// Everything a program that writes and launches kernels needs.
pub mod prelude {
    pub use crate::tile_kernel;
    pub use tile_runtime::{
        assert_close, bench, bf16, f16, rel_error, BenchResult, Device, DeviceTensor, Element, Error, Stream,
    };
}

/// What `#[tile_kernel]` generates calls to. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use tile_runtime::__private::{launch, launch_tuned, KernelArg};
}

//! Runtime for tile kernels: devices (a CUDA GPU through cudarc with the
//! driver loaded at run time, or the CPU interpreter), streams and events,
//! device tensors, the launch path that generated `launch` wrappers call,
//! and timing/checking helpers.
//!
//! Architecture invariant: nothing here panics on a machine without an
//! NVIDIA driver; every CUDA entry point first checks that `libcuda` loads
//! and returns [`Error::NoDriver`] otherwise. The GPU and interpreter paths
//! share argument checking, dimension binding and grid evaluation
//! (`tile_ir::abi`), so a launch that is wrong on one is wrong on the other
//! with the same message.
//!
//! Layers, each importing only from layers before it: `error`, `element`;
//! `driver` (libcuda, driver errors); `tensor_map` (TMA maps as data);
//! `cache` (what a GPU keeps between launches); `device` (devices, streams,
//! events); `tensor`, `tma` (encoding maps), `bench`; `cublas`; `launch/`
//! (metadata, arguments, variant choice, the CUDA and interpreter paths).
#![warn(missing_docs)]

#[cfg(not(any(feature = "dynamic-loading", feature = "dynamic-linking")))]
compile_error!(
    "tile-runtime needs one of its features `dynamic-loading` (the default) or `dynamic-linking` (to link libcuda \
     at build time, as candle's CUDA backend does)"
);
#[cfg(all(feature = "dynamic-loading", feature = "dynamic-linking"))]
compile_error!(
    "tile-runtime's features `dynamic-loading` and `dynamic-linking` exclude each other: with candle's CUDA backend \
     (which links libcuda), depend on tile with `default-features = false, features = [\"dynamic-linking\"]`"
);

mod bench;
mod cache;
pub mod cublas;
mod device;
mod driver;
mod element;
mod error;
mod interop;
mod launch;
mod tensor;
mod tensor_map;
mod tma;
pub mod tune;

pub use bench::{assert_close, bench, rel_error, BenchResult};
pub use cache::ModuleSource;
pub use device::{Device, Event, Stream, INTERPRET_CHECK_ENV, INTERPRET_ENV};
pub use element::Element;
pub use error::{Error, Result};
pub use half::{bf16, f16};
pub use interop::{TensorView, TensorViewMut};
pub use launch::{KernelMeta, KernelTarget, TensorArg, TensorArgMut, TensorMapMeta};
pub use tensor::{DeviceTensor, Reshaped};
pub use tensor_map::{L2Promotion, TensorMap, TensorMapSpec, TmaSwizzle};

/// The cudarc version the runtime uses, for calling other CUDA libraries
/// (cuBLAS) on the same context, stream and memory.
pub use cudarc;

/// What generated code calls. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::interop::{SliceRead, SliceWrite};
    pub use crate::launch::{launch, KernelArg};
    pub use crate::tensor::RawTensor;
    pub use crate::tune::launch_tuned;
}

//! The launch path shared by every generated `launch` wrapper.
//!
//! `#[tile_kernel]` embeds a [`KernelMeta`] (the Tile IR as JSON and the PTX
//! of each target, possibly several variants per target) in a `static`, and
//! its wrapper calls [`launch`] with one [`KernelArg`] per parameter. `launch`:
//! 1. parses the IR once per `KernelMeta` (cached by the static's address) and
//!    checks that it describes a launchable signature and that every
//!    variant's tensor maps name tensor parameters of the right rank
//!    (`meta.rs`);
//! 2. checks the arguments' number, kind, element type, mutability and device
//!    (`args.rs`);
//! 3. binds the dynamic dimensions from the tensor shapes and evaluates the
//!    grid (`tile_ir::abi`, the same code for both paths); an empty grid does
//!    nothing;
//! 4. runs the kernel on the interpreter (`interp.rs`), or on the GPU
//!    (`cuda.rs`): picks the target arch for the device (sm_90a on 9.x, else
//!    sm_80) and, among that arch's variants (preferred first), the first
//!    whose mapped tensors are all TMA-addressable (`variant.rs`); checks the
//!    thread block cluster against the grid (9.x and later); loads the
//!    variant once per device (keeping the driver's JIT log on failure),
//!    raises the dynamic shared-memory limit once when needed, encodes the
//!    variant's tensor maps (cached per device by their exact spec), and
//!    launches with the variant's threads and the parameters in the launch
//!    ABI order, tensor maps last (`cuLaunchKernelEx` with a cluster
//!    dimension when clustered).
//!
//! The cluster never changes what a kernel computes (`Kernel::cluster`), so
//! devices without clusters (before 9.0) and the interpreter ignore it.
//!
//! Imports go one way: this file calls the others; `cuda` uses `variant`,
//! `args` and `meta`; `interp` uses `args`; `variant` uses `meta`; none of
//! them imports this file or the runtime's upper layers.

mod args;
mod cuda;
#[cfg(test)]
mod fixtures;
mod interp;
mod limits;
mod meta;
mod trace;
mod variant;

pub use args::{KernelArg, TensorArg, TensorArgMut};
pub(crate) use meta::parsed_kernel;
pub use meta::{KernelMeta, KernelTarget, TensorMapMeta};

use crate::device::{DeviceKind, Stream};
use crate::error::{Error, Result};

/// Launches the kernel described by `meta` on `stream` with `args` (one per
/// kernel parameter, in order). Returns once the launch is issued (GPU) or
/// the kernel has run (interpreter).
pub fn launch(stream: &Stream, meta: &'static KernelMeta, args: &mut [KernelArg<'_>]) -> Result<()> {
    let kernel = meta::parsed_kernel(meta)?;
    let k = &*kernel;
    args::check_args(k, stream, args)?;

    let dims = args::bind_dims(k, args)?;
    let grid =
        tile_ir::abi::eval_grid(k, &dims).map_err(|message| Error::Launch { kernel: k.name.clone(), message })?;
    if grid.contains(&0) {
        return Ok(());
    }

    match &stream.device.kind {
        DeviceKind::Interpreter => interp::launch_interpreter(k, args, &dims, grid),
        DeviceKind::Cuda(dev) => {
            let on = stream.cuda.as_ref().ok_or_else(|| Error::DeviceMismatch("the stream".into()))?;
            cuda::launch_cuda(dev, on, &stream.tile_counter, meta, k, args, &dims, grid)
        }
    }
}

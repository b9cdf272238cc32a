//! Saving the writable tensors a kernel reads before the tuner times
//! candidates on them, and restoring them before the real launch.
//!
//! Expects the launch's arguments (already checked by a launch of the
//! first candidate or not: a tensor on another device is reported by the
//! launch itself) and, per parameter, whether the kernel reads it
//! (`tile_ir::abi::reads_tensor`). Guarantees that after [`Saved::restore`]
//! every saved tensor holds, in stream order, exactly the bytes it held at
//! [`Saved::take`].

use cudarc::driver::safe::{CudaSlice, DevicePtr};

use crate::device::Stream;
use crate::driver::driver_err;
use crate::error::{Error, Result};
use crate::launch::KernelArg;
use crate::tensor::Storage;

enum Backup {
    Host(Vec<u8>),
    Cuda(CudaSlice<u8>),
}

/// The saved contents of some writable arguments, by argument index.
pub(crate) struct Saved {
    backups: Vec<(usize, Backup)>,
}

/// The device address of a writable GPU argument (with the guard that must
/// live while it is used), its byte count.
fn with_cuda_ptr<R>(stream: &Stream, arg: &mut KernelArg<'_>, f: impl FnOnce(u64, usize) -> Result<R>) -> Result<R> {
    let cu = stream.cuda.as_ref().ok_or_else(|| Error::DeviceMismatch("the stream".into()))?;
    match arg {
        KernelArg::TensorMut(raw) => {
            let bytes = raw.len() * raw.dtype.size_bytes() as usize;
            f(raw.device_ptr().unwrap_or(0), bytes)
        }
        KernelArg::ViewMut(raw, slice, offset) => {
            let bytes = raw.len() * raw.dtype.size_bytes() as usize;
            let offset = *offset;
            let (ptr, _guard) = slice.write_ptr(cu);
            f(ptr + offset, bytes)
        }
        _ => Err(Error::Usage("internal: saving a tensor that is not writable".into())),
    }
}

fn dtod(stream: &Stream, dst: u64, src: u64, bytes: usize) -> Result<()> {
    let cu = stream.cuda.as_ref().ok_or_else(|| Error::DeviceMismatch("the stream".into()))?;
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: both addresses are live device allocations of at least
    // `bytes` bytes on this stream's context (a checked tensor argument and
    // a backup allocated with its size), ordered on this stream.
    unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, cu.cu_stream()) }
        .map_err(driver_err("cuMemcpyDtoDAsync"))
}

impl Saved {
    /// Copies every writable argument `i` with `reads[i]` (on the device,
    /// in stream order).
    pub(crate) fn take(stream: &Stream, args: &mut [KernelArg<'_>], reads: &[bool]) -> Result<Saved> {
        let mut backups = Vec::new();
        for (i, arg) in args.iter_mut().enumerate() {
            if !arg.writable() || !reads.get(i).copied().unwrap_or(true) {
                continue;
            }
            if let KernelArg::TensorMut(raw) = arg {
                if let Storage::Host(v) = &raw.storage {
                    backups.push((i, Backup::Host(v.clone())));
                    continue;
                }
            }
            let cu = stream.cuda.as_ref().ok_or_else(|| Error::DeviceMismatch("the stream".into()))?.clone();
            let backup = with_cuda_ptr(stream, arg, |src, bytes| {
                let copy = cu.alloc_zeros::<u8>(bytes.max(1)).map_err(driver_err("cuMemAllocAsync"))?;
                let (dst, _guard) = copy.device_ptr(&cu);
                dtod(stream, dst, src, bytes)?;
                drop(_guard);
                Ok(copy)
            })?;
            backups.push((i, Backup::Cuda(backup)));
        }
        Ok(Saved { backups })
    }

    /// Writes every saved argument back.
    pub(crate) fn restore(&self, stream: &Stream, args: &mut [KernelArg<'_>]) -> Result<()> {
        for (i, backup) in &self.backups {
            let arg = &mut args[*i];
            match backup {
                Backup::Host(v) => {
                    if let KernelArg::TensorMut(raw) = arg {
                        if let Storage::Host(dst) = &mut raw.storage {
                            dst.copy_from_slice(v);
                        }
                    }
                }
                Backup::Cuda(copy) => {
                    let cu = stream.cuda.as_ref().ok_or_else(|| Error::DeviceMismatch("the stream".into()))?.clone();
                    let (src, guard) = copy.device_ptr(&cu);
                    with_cuda_ptr(stream, arg, |dst, bytes| dtod(stream, dst, src, bytes))?;
                    drop(guard);
                }
            }
        }
        Ok(())
    }
}

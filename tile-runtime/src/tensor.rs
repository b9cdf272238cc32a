//! Device tensors: contiguous, row-major arrays of one [`Element`] type.
//!
//! Storage is device memory (a cudarc `CudaSlice<u8>`) on a GPU and a host
//! `Vec<u8>` on the interpreter, in both cases little-endian elements in
//! row-major order, which is what kernels (and the interpreter) expect.
//! A tensor remembers its device; using it with a stream of another device is
//! [`Error::DeviceMismatch`].

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::safe::{CudaSlice, DevicePtr};
use tile_ir::DType;

use crate::device::{CudaDevice, DeviceKind, Stream};
use crate::driver::driver_err;
use crate::element::{as_bytes, as_bytes_mut, from_bytes, Element};
use crate::error::{Error, Result};

/// A tensor of `T` on a device (a GPU or the interpreter).
pub struct DeviceTensor<T: Element> {
    pub(crate) raw: RawTensor,
    marker: PhantomData<T>,
}

/// A tensor without its static element type (what a launch sees).
#[doc(hidden)]
pub struct RawTensor {
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) storage: Storage,
}

pub(crate) enum Storage {
    Host(Vec<u8>),
    /// `slice` is `None` for a tensor of no elements (no allocation).
    Cuda {
        device: Arc<CudaDevice>,
        slice: Option<CudaSlice<u8>>,
    },
}

impl<T: Element> std::fmt::Debug for DeviceTensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match &self.raw.storage {
            Storage::Host(_) => "interpreter".to_string(),
            Storage::Cuda { device, .. } => format!("cuda:{}", device.ordinal),
        };
        write!(f, "DeviceTensor<{}>{:?} on {place}", self.raw.dtype, self.raw.shape)
    }
}

fn shape_error(message: String) -> Error {
    Error::Shape { kernel: String::new(), param: String::new(), dim: None, message }
}

/// The number of elements of `shape`, or an error if it overflows.
fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| shape_error(format!("shape {shape:?} has more elements than fit in memory")))
}

impl RawTensor {
    pub(crate) fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Checks that this tensor lives on `stream`'s device; `what` names it in the error.
    pub(crate) fn check_device(&self, stream: &Stream, what: &dyn Fn() -> String) -> Result<()> {
        let same = match (&self.storage, &stream.device.kind) {
            (Storage::Host(_), DeviceKind::Interpreter) => true,
            (Storage::Cuda { device, .. }, DeviceKind::Cuda(d)) => Arc::ptr_eq(device, d),
            _ => false,
        };
        if same {
            Ok(())
        } else {
            Err(Error::DeviceMismatch(what()))
        }
    }

    /// The device address (0 for an empty tensor); `None` on the interpreter.
    pub(crate) fn device_ptr(&self) -> Option<u64> {
        match &self.storage {
            Storage::Host(_) => None,
            Storage::Cuda { device, slice } => Some(match slice {
                None => 0,
                Some(s) => s.device_ptr(&device.stream).0,
            }),
        }
    }
}

impl<T: Element> DeviceTensor<T> {
    fn from_raw(raw: RawTensor) -> Self {
        DeviceTensor { raw, marker: PhantomData }
    }

    /// Copies `data` (row-major) to a new tensor of `shape` on `stream`'s device.
    /// `data.len()` must equal the product of `shape`.
    pub fn from_slice(stream: &Stream, data: &[T], shape: &[usize]) -> Result<Self> {
        let n = element_count(shape)?;
        if data.len() != n {
            return Err(shape_error(format!(
                "DeviceTensor::from_slice: shape {shape:?} has {n} elements but the data has {}",
                data.len()
            )));
        }
        let bytes = as_bytes(data);
        let storage = match &stream.device.kind {
            DeviceKind::Interpreter => Storage::Host(bytes.to_vec()),
            DeviceKind::Cuda(dev) => {
                let slice = if bytes.is_empty() {
                    None
                } else {
                    Some(dev.stream.clone_htod(bytes).map_err(driver_err("cuMemcpyHtoDAsync"))?)
                };
                Storage::Cuda { device: dev.clone(), slice }
            }
        };
        Ok(Self::from_raw(RawTensor { shape: shape.to_vec(), dtype: T::DTYPE, storage }))
    }

    /// A new tensor of `shape` filled with zeros.
    pub fn zeros(stream: &Stream, shape: &[usize]) -> Result<Self> {
        let n = element_count(shape)?;
        let bytes = n
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| shape_error(format!("shape {shape:?} has more bytes than fit in memory")))?;
        let storage = match &stream.device.kind {
            DeviceKind::Interpreter => Storage::Host(vec![0u8; bytes]),
            DeviceKind::Cuda(dev) => {
                let slice = if bytes == 0 {
                    None
                } else {
                    Some(dev.stream.alloc_zeros::<u8>(bytes).map_err(driver_err("cuMemAllocAsync"))?)
                };
                Storage::Cuda { device: dev.clone(), slice }
            }
        };
        Ok(Self::from_raw(RawTensor { shape: shape.to_vec(), dtype: T::DTYPE, storage }))
    }

    /// Copies the tensor back to the host (row-major). Waits for the stream's
    /// earlier work (kernels writing this tensor) to finish.
    pub fn to_vec(&self, stream: &Stream) -> Result<Vec<T>> {
        self.raw.check_device(stream, &|| "the tensor read by to_vec".to_string())?;
        match &self.raw.storage {
            Storage::Host(bytes) => Ok(from_bytes(bytes)),
            Storage::Cuda { device, slice } => {
                let mut out = vec![T::from_f64(0.0); self.len()];
                if let Some(slice) = slice {
                    device
                        .stream
                        .memcpy_dtoh(slice, as_bytes_mut(&mut out))
                        .map_err(driver_err("cuMemcpyDtoHAsync"))?;
                    device.stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
                }
                Ok(out)
            }
        }
    }

    /// Copies `src` into `self` on the device (`cuMemcpyDtoDAsync`), in
    /// stream order. Both must have the same number of elements.
    pub fn copy_from(&mut self, stream: &Stream, src: &DeviceTensor<T>) -> Result<()> {
        self.raw.check_device(stream, &|| "the destination of copy_from".to_string())?;
        src.raw.check_device(stream, &|| "the source of copy_from".to_string())?;
        if self.len() != src.len() {
            return Err(shape_error(format!(
                "copy_from: the destination has shape {:?} ({} elements) but the source has shape {:?} ({} elements)",
                self.shape(),
                self.len(),
                src.shape(),
                src.len()
            )));
        }
        match (&mut self.raw.storage, &src.raw.storage) {
            (Storage::Host(dst), Storage::Host(s)) => {
                dst.copy_from_slice(s);
                Ok(())
            }
            (Storage::Cuda { device, slice: Some(dst) }, Storage::Cuda { slice: Some(s), .. }) => {
                device.stream.memcpy_dtod(s, dst).map_err(driver_err("cuMemcpyDtoDAsync"))
            }
            // Empty tensors: nothing to copy.
            (Storage::Cuda { .. }, Storage::Cuda { .. }) => Ok(()),
            _ => Err(Error::DeviceMismatch("the source of copy_from".into())),
        }
    }

    /// A copy of this tensor on the same device.
    pub fn try_clone(&self, stream: &Stream) -> Result<Self> {
        let mut out = Self::zeros(stream, self.shape())?;
        out.copy_from(stream, self)?;
        Ok(out)
    }

    /// The same data with a new shape of the same number of elements.
    pub fn reshape(self, shape: &[usize]) -> Result<Self> {
        let n = element_count(shape)?;
        if n != self.len() {
            return Err(shape_error(format!(
                "reshape: cannot view shape {:?} ({} elements) as {shape:?} ({n} elements)",
                self.shape(),
                self.len()
            )));
        }
        let mut raw = self.raw;
        raw.shape = shape.to_vec();
        Ok(Self::from_raw(raw))
    }

    pub fn shape(&self) -> &[usize] {
        &self.raw.shape
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dtype(&self) -> DType {
        self.raw.dtype
    }

    /// The size of the data in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }

    /// The device address of the first element, for calling other CUDA
    /// libraries (0 for an empty tensor); `None` on the interpreter.
    pub fn device_ptr(&self) -> Option<u64> {
        self.raw.device_ptr()
    }

    /// The cudarc allocation (bytes) of a GPU tensor; `None` on the
    /// interpreter or for an empty tensor.
    pub fn cuda_slice(&self) -> Option<&CudaSlice<u8>> {
        match &self.raw.storage {
            Storage::Cuda { slice, .. } => slice.as_ref(),
            Storage::Host(_) => None,
        }
    }

    /// The cudarc allocation (bytes) of a GPU tensor, mutably.
    pub fn cuda_slice_mut(&mut self) -> Option<&mut CudaSlice<u8>> {
        match &mut self.raw.storage {
            Storage::Cuda { slice, .. } => slice.as_mut(),
            Storage::Host(_) => None,
        }
    }
}

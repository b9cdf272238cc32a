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

use cudarc::driver::safe::CudaStream;
use cudarc::driver::sys::CUresult;

use crate::device::{CudaDevice, DeviceKind, Stream};
use crate::driver::{describe, driver_err};
use crate::element::{as_bytes, as_bytes_mut, from_bytes, Element};
use crate::error::{Error, Result};

/// A tensor of `T` on a device (a GPU or the interpreter).
pub struct DeviceTensor<T: Element> {
    pub(crate) raw: RawTensor,
    marker: PhantomData<T>,
}

/// A [`DeviceTensor`] seen with another shape ([`DeviceTensor::view_as`]):
/// read-only, no copy.
pub struct Reshaped<'a, T: Element> {
    /// The view's shape, dtype and device (no bytes).
    pub(crate) facts: RawTensor,
    /// The tensor whose bytes it reads.
    pub(crate) data: &'a RawTensor,
    marker: PhantomData<&'a T>,
}

impl<T: Element> Reshaped<'_, T> {
    /// The view's shape.
    pub fn shape(&self) -> &[usize] {
        &self.facts.shape
    }
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

/// A GiB figure for messages.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// What to say when `bytes` do not fit on a GPU with `total` bytes of
/// memory of which `free` (when known) are free.
pub(crate) fn device_memory_message(bytes: u64, total: u64, free: Option<u64>) -> String {
    let limit = match free {
        Some(free) => {
            format!("the device has {total} bytes ({}), {free} bytes ({}) of them free", gib(total), gib(free))
        }
        None => format!("the device has {total} bytes ({}) in all", gib(total)),
    };
    if bytes > total {
        format!("{limit}; no tensor this large fits: split the work into smaller tensors")
    } else {
        format!("{limit}; drop tensors that are no longer needed (or synchronize so that freed memory returns), or split the work into smaller tensors")
    }
}

/// The host's physical memory in bytes (`MemTotal` of `/proc/meminfo`),
/// where the system says; read once.
fn host_memory() -> Option<u64> {
    static TOTAL: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// `n` zeroed host bytes, or `None` when the host cannot allocate them
/// (never an abort: the interpreter's tensors are host memory). More than
/// the host's physical memory is refused even where the system would
/// overcommit it, since zeroed pages are touched as soon as a kernel runs.
fn try_zeroed_host(n: usize) -> Option<Vec<u8>> {
    if n == 0 {
        return Some(Vec::new());
    }
    if host_memory().is_some_and(|total| n as u64 > total) {
        return None;
    }
    let layout = std::alloc::Layout::array::<u8>(n).ok()?;
    // SAFETY: `layout` has a non-zero size. A non-null result is `n` zeroed
    // bytes allocated by the global allocator with the layout of a
    // `Vec<u8>` of capacity `n`, so the vector may own and free it.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout);
        (!ptr.is_null()).then(|| Vec::from_raw_parts(ptr, n, n))
    }
}

/// A copy of `bytes` in host memory, or `None` when the host cannot allocate it.
fn try_host_copy(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(bytes.len()).ok()?;
    v.extend_from_slice(bytes);
    Some(v)
}

/// Allocates `bytes` on `stream` (zeroed, or a copy of `init`), with an
/// [`Error::OutOfMemory`] naming `tensor` when they do not fit: checked
/// against the device's memory before the driver call, and the driver's
/// out-of-memory turned into the same error.
fn cuda_alloc(
    dev: &CudaDevice,
    stream: &Arc<CudaStream>,
    tensor: &dyn Fn() -> String,
    bytes: usize,
    init: Option<&[u8]>,
) -> Result<CudaSlice<u8>> {
    let oom = |free: Option<u64>| Error::OutOfMemory {
        tensor: tensor(),
        device: format!("{} (cuda:{})", dev.name, dev.ordinal),
        bytes: bytes as u64,
        message: device_memory_message(bytes as u64, dev.limits.total_memory, free),
    };
    if bytes as u64 > dev.limits.total_memory {
        return Err(oom(None));
    }
    let allocated = match init {
        None => stream.alloc_zeros::<u8>(bytes).map_err(|e| (e, "cuMemAllocAsync")),
        Some(data) => stream.clone_htod(data).map_err(|e| (e, "cuMemcpyHtoDAsync")),
    };
    allocated.map_err(|(e, call)| {
        if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            oom(dev.ctx.mem_get_info().ok().map(|(free, _)| free as u64))
        } else {
            Error::Driver { call: call.to_string(), message: describe(e) }
        }
    })
}

/// The error for a host allocation of `bytes` that failed.
fn host_oom(tensor: String, device: &str, bytes: usize) -> Error {
    Error::OutOfMemory {
        tensor,
        device: device.into(),
        bytes: bytes as u64,
        message: "the host cannot allocate that much memory (the interpreter keeps tensors in host memory); use \
                  smaller tensors"
            .into(),
    }
}

/// "a DeviceTensor<f32> of shape [..]", for messages.
fn describe_tensor(dtype: DType, shape: &[usize]) -> String {
    format!("a DeviceTensor<{dtype}> of shape {shape:?}")
}

/// The CUDA stream of `stream`, which must be a GPU stream.
fn cuda_of(stream: &Stream) -> Result<&Arc<CudaStream>> {
    stream.cuda.as_ref().ok_or_else(|| Error::DeviceMismatch("the stream's device has no CUDA stream".into()))
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
        let what = || describe_tensor(T::DTYPE, shape);
        let storage = match &stream.device.kind {
            DeviceKind::Interpreter => {
                Storage::Host(try_host_copy(bytes).ok_or_else(|| host_oom(what(), "the CPU interpreter", bytes.len()))?)
            }
            DeviceKind::Cuda(dev) => {
                let slice = if bytes.is_empty() {
                    None
                } else {
                    Some(cuda_alloc(dev, cuda_of(stream)?, &what, bytes.len(), Some(bytes))?)
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
        let what = || describe_tensor(T::DTYPE, shape);
        let storage = match &stream.device.kind {
            DeviceKind::Interpreter => {
                Storage::Host(try_zeroed_host(bytes).ok_or_else(|| host_oom(what(), "the CPU interpreter", bytes))?)
            }
            DeviceKind::Cuda(dev) => {
                let slice =
                    if bytes == 0 { None } else { Some(cuda_alloc(dev, cuda_of(stream)?, &what, bytes, None)?) };
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
            Storage::Cuda { slice, .. } => {
                let mut out = Vec::new();
                out.try_reserve_exact(self.len()).map_err(|_| {
                    host_oom(
                        format!("a host copy of {}", describe_tensor(T::DTYPE, self.shape())),
                        "the host",
                        self.num_bytes(),
                    )
                })?;
                out.resize(self.len(), T::from_f64(0.0));
                if let Some(slice) = slice {
                    let s = cuda_of(stream)?;
                    s.memcpy_dtoh(slice, as_bytes_mut(&mut out)).map_err(driver_err("cuMemcpyDtoHAsync"))?;
                    s.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
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
            (Storage::Cuda { slice: Some(dst), .. }, Storage::Cuda { slice: Some(s), .. }) => {
                cuda_of(stream)?.memcpy_dtod(s, dst).map_err(driver_err("cuMemcpyDtoDAsync"))
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
        self.check_reshape("reshape", shape)?;
        let mut raw = self.raw;
        raw.shape = shape.to_vec();
        Ok(Self::from_raw(raw))
    }

    /// The same data seen with `shape` (of the same number of elements),
    /// read-only and without a copy, for as long as `self` is borrowed: for
    /// a kernel that takes the tensor with dims merged or split (MLA's
    /// `q [b, s_q, h_q, 576]` as `[b, s_q·h_q, 576]`). Pass `&view` wherever
    /// a `&DeviceTensor<T>` goes.
    pub fn view_as(&self, shape: &[usize]) -> Result<Reshaped<'_, T>> {
        self.check_reshape("view_as", shape)?;
        // The view's facts (shape, dtype, device); the bytes stay `self`'s.
        let storage = match &self.raw.storage {
            Storage::Host(_) => Storage::Host(Vec::new()),
            Storage::Cuda { device, .. } => Storage::Cuda { device: device.clone(), slice: None },
        };
        let facts = RawTensor { shape: shape.to_vec(), dtype: T::DTYPE, storage };
        Ok(Reshaped { facts, data: &self.raw, marker: PhantomData })
    }

    /// [`DeviceTensor::reshape`] in place: the same data, from now on seen
    /// with `shape` (of the same number of elements). For a kernel that
    /// takes a tensor in another shape than its caller's (merged dims), the
    /// caller's shape restored after the launch.
    pub fn reshape_in_place(&mut self, shape: &[usize]) -> Result<()> {
        self.check_reshape("reshape", shape)?;
        self.raw.shape = shape.to_vec();
        Ok(())
    }

    /// That `shape` has this tensor's number of elements (`what`: the
    /// method, for the message).
    fn check_reshape(&self, what: &str, shape: &[usize]) -> Result<()> {
        let n = element_count(shape)?;
        if n != self.len() {
            return Err(shape_error(format!(
                "{what}: cannot view shape {:?} ({} elements) as {shape:?} ({n} elements)",
                self.shape(),
                self.len()
            )));
        }
        Ok(())
    }

    /// The tensor's shape (row-major, outermost first).
    pub fn shape(&self) -> &[usize] {
        &self.raw.shape
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_out_of_memory_message_gives_the_limit_and_what_to_do() {
        let total = 150_000_000_000u64;
        let m = device_memory_message(1_000_000_000_000, total, None);
        assert!(m.starts_with("the device has 150000000000 bytes (139.7 GiB) in all"), "{m}");
        assert!(m.contains("no tensor this large fits: split the work"), "{m}");
        let m = device_memory_message(100_000_000_000, total, Some(60_000_000_000));
        assert!(m.contains("60000000000 bytes (55.9 GiB) of them free"), "{m}");
        assert!(m.contains("drop tensors that are no longer needed"), "{m}");
        let e = Error::OutOfMemory {
            tensor: describe_tensor(DType::F32, &[250_000_000_000]),
            device: "NVIDIA H200 (cuda:0)".into(),
            bytes: 1_000_000_000_000,
            message: m,
        };
        let text = e.to_string();
        assert!(
            text.starts_with(
                "cannot allocate a DeviceTensor<f32> of shape [250000000000] (1000000000000 bytes) on NVIDIA H200 (cuda:0): "
            ),
            "{text}"
        );
    }

    #[test]
    fn host_allocations_fail_as_none_not_an_abort() {
        assert_eq!(try_zeroed_host(0), Some(Vec::new()));
        assert_eq!(try_zeroed_host(5), Some(vec![0; 5]));
        assert_eq!(try_zeroed_host(usize::MAX), None);
        assert_eq!(try_zeroed_host(isize::MAX as usize), None);
        assert_eq!(try_host_copy(&[1, 2, 3]), Some(vec![1, 2, 3]));
        // Past the host's physical memory, even where the system overcommits.
        if let Some(total) = host_memory() {
            assert!(total > 1 << 20, "{total}");
            assert_eq!(try_zeroed_host(total as usize + 1), None);
        }
    }
}

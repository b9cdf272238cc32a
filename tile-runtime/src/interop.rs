//! Zero-copy interop with memory and streams owned elsewhere (cudarc, and
//! what is built on it, such as candle): [`TensorView`] and
//! [`TensorViewMut`] borrow a cudarc `CudaSlice<T>` as a tensor of a shape
//! (from an element offset), and [`Stream::from_cudarc`] launches on a
//! caller's `CudaStream`.
//!
//! Expects slices and streams of a device's primary context (what
//! `cudarc::driver::CudaContext::new(ordinal)` opens, and what tile loads
//! its kernels into). Guarantees: no copy (a kernel reads and writes the
//! slice's own memory, at its device address plus the offset); a view
//! cannot outlive its slice, and a writable view holds the slice's `&mut`
//! (the borrow checker); a shape whose elements do not fit in the slice
//! past the offset is an [`Error::Shape`], an offset that breaks the
//! 16-byte alignment kernels assume of a tensor's start an [`Error::Usage`],
//! a slice or stream of another context an [`Error::DeviceMismatch`], all at
//! construction (and every tensor's address is checked again at launch,
//! `launch/cuda.rs`); at launch
//! the view's pointer is taken through cudarc's `DevicePtr`/`DevicePtrMut`
//! on the launch's stream, so cudarc's own stream synchronization (when the
//! context manages it) sees the kernel's accesses.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::safe::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use tile_ir::DType;

use crate::device::{CudaDevice, Device, DeviceKind, Stream};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::tensor::{RawTensor, Storage};

/// The opened tile device of cudarc context `ctx`, which must be that
/// device's primary context; `what` names the slice or stream in errors.
fn device_of(ctx: &Arc<CudaContext>, what: &str) -> Result<Arc<CudaDevice>> {
    let device = Device::cuda(ctx.ordinal())?;
    let DeviceKind::Cuda(dev) = device.kind else {
        return Err(Error::DeviceMismatch(format!("{what} (no CUDA device {})", ctx.ordinal())));
    };
    if **ctx != *dev.ctx {
        return Err(Error::DeviceMismatch(format!(
            "{what} belongs to a CUDA context other than the primary context of device {} (tile loads its \
             kernels there; open the context with `CudaContext::new({})`), and so",
            ctx.ordinal(),
            ctx.ordinal()
        )));
    }
    Ok(dev)
}

impl Stream {
    /// A stream that launches on `stream`, a cudarc stream the caller owns
    /// (candle's, say): kernels are issued on it, in its order, with no
    /// synchronization added. Its context must be the primary context of
    /// its device (`CudaContext::new(ordinal)`), else
    /// [`Error::DeviceMismatch`].
    pub fn from_cudarc(stream: Arc<CudaStream>) -> Result<Stream> {
        let dev = device_of(stream.context(), "the cudarc stream")?;
        Ok(Stream {
            device: Device { kind: DeviceKind::Cuda(dev) },
            cuda: Some(stream),
            tile_counter: crate::device::TileCounter::default(),
        })
    }
}

/// What a launch needs of a borrowed cudarc slice, whatever its element
/// type: its device address for reading on a stream (through cudarc's
/// `DevicePtr`, so that the stream waits for the slice's last write when
/// cudarc tracks it). Implemented for every `CudaSlice<T>`.
#[doc(hidden)]
pub trait SliceRead: Sync {
    fn read_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>);
}

/// [`SliceRead`] for writing (`DevicePtrMut`).
#[doc(hidden)]
pub trait SliceWrite: Send {
    fn write_ptr<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>);
}

impl<T> SliceRead for CudaSlice<T> {
    fn read_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        self.device_ptr(stream)
    }
}

impl<T> SliceWrite for CudaSlice<T> {
    fn write_ptr<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        self.device_ptr_mut(stream)
    }
}

/// Checks that a view of `shape` fits in a slice of `len` elements of
/// `dtype` (`elem_bytes` each) past `offset`; `what` names the view.
fn check_fits(len: usize, offset: usize, shape: &[usize], dtype: DType, elem_bytes: usize, what: &str) -> Result<()> {
    let shape_err = |message: String| Error::Shape { kernel: String::new(), param: String::new(), dim: None, message };
    let elements = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| shape_err(format!("{what}: shape {shape:?} has more elements than fit in memory")))?;
    let available = len.checked_sub(offset).ok_or_else(|| {
        shape_err(format!("{what}: the offset {offset} is past the end of the slice ({len} elements of {dtype})"))
    })?;
    if elements > available {
        return Err(shape_err(format!(
            "{what}: shape {shape:?} needs {elements} elements ({} bytes of {dtype}) but the slice has {available} \
             past the offset {offset} ({len} in all); give a smaller shape or a larger slice",
            elements as u128 * elem_bytes as u128
        )));
    }
    Ok(())
}

/// The alignment kernels assume of every tensor's first element: their
/// vector accesses (up to 16 bytes), cp.async chunks and TMA need it, and
/// every allocation has it. A view's byte offset must keep it.
pub(crate) const TENSOR_ALIGN: u64 = 16;

/// Checks that a view `offset` elements into a slice keeps the slice's
/// 16-byte alignment ([`TENSOR_ALIGN`]).
fn check_offset_alignment(offset: usize, dtype: DType, elem_bytes: usize, what: &str) -> Result<()> {
    let bytes = offset as u64 * elem_bytes as u64;
    if bytes % TENSOR_ALIGN != 0 {
        let step = TENSOR_ALIGN / elem_bytes as u64;
        return Err(Error::Usage(format!(
            "{what}: the offset {offset} ({bytes} bytes) is not a multiple of {TENSOR_ALIGN} bytes ({step} elements \
             of {dtype}); tile kernels read and write tensors with vector accesses that need a {TENSOR_ALIGN}-byte \
             aligned start: use an offset that is a multiple of {step}"
        )));
    }
    Ok(())
}

/// The tensor facts of a view of a slice of `len` elements (device, shape,
/// dtype; no storage of its own), after checking that `shape` fits past
/// `offset` and that the slice is of a device's primary context.
fn view_tensor<T: Element>(
    ctx: &Arc<CudaContext>,
    len: usize,
    offset: usize,
    shape: &[usize],
    what: &str,
) -> Result<RawTensor> {
    check_fits(len, offset, shape, T::DTYPE, std::mem::size_of::<T>(), what)?;
    check_offset_alignment(offset, T::DTYPE, std::mem::size_of::<T>(), what)?;
    let device = device_of(ctx, &format!("the slice of the {what}"))?;
    Ok(RawTensor { shape: shape.to_vec(), dtype: T::DTYPE, storage: Storage::Cuda { device, slice: None } })
}

/// A read-only tensor of shape `shape` over the elements of a cudarc
/// `CudaSlice<T>` from `offset` on: no copy, for as long as the slice is
/// borrowed. Pass it to a generated `launch` wherever a `&DeviceTensor<T>`
/// goes (`&view`).
pub struct TensorView<'a, T: Element> {
    pub(crate) raw: RawTensor,
    pub(crate) slice: &'a CudaSlice<T>,
    /// Bytes from the slice's device address to the view's first element.
    pub(crate) offset_bytes: u64,
    marker: PhantomData<&'a T>,
}

/// A writable tensor over a cudarc `CudaSlice<T>` (as [`TensorView`]),
/// holding the slice's `&mut`: pass `&mut view` wherever a
/// `&mut DeviceTensor<T>` goes.
pub struct TensorViewMut<'a, T: Element> {
    pub(crate) raw: RawTensor,
    pub(crate) slice: &'a mut CudaSlice<T>,
    pub(crate) offset_bytes: u64,
    marker: PhantomData<&'a mut T>,
}

impl<'a, T: Element> TensorView<'a, T> {
    /// The whole slice's first `shape`-many elements as a tensor of `shape`.
    pub fn new(slice: &'a CudaSlice<T>, shape: &[usize]) -> Result<Self> {
        Self::with_offset(slice, 0, shape)
    }

    /// The elements from `offset` (in elements) on, as a tensor of `shape`:
    /// a sub-range of the slice. [`Error::Shape`] when `offset` plus the
    /// shape's elements pass the slice's end; [`Error::Usage`] when the
    /// offset is not a multiple of 16 bytes (kernels assume 16-byte aligned
    /// tensors).
    pub fn with_offset(slice: &'a CudaSlice<T>, offset: usize, shape: &[usize]) -> Result<Self> {
        let raw = view_tensor::<T>(slice.context(), slice.len(), offset, shape, "TensorView")?;
        let offset_bytes = (offset * std::mem::size_of::<T>()) as u64;
        Ok(TensorView { raw, slice, offset_bytes, marker: PhantomData })
    }

    /// The view's shape (row-major, as given when it was made).
    pub fn shape(&self) -> &[usize] {
        &self.raw.shape
    }
}

impl<'a, T: Element> TensorViewMut<'a, T> {
    /// As [`TensorView::new`], writable.
    pub fn new(slice: &'a mut CudaSlice<T>, shape: &[usize]) -> Result<Self> {
        Self::with_offset(slice, 0, shape)
    }

    /// As [`TensorView::with_offset`], writable.
    pub fn with_offset(slice: &'a mut CudaSlice<T>, offset: usize, shape: &[usize]) -> Result<Self> {
        let raw = view_tensor::<T>(slice.context(), slice.len(), offset, shape, "TensorViewMut")?;
        let offset_bytes = (offset * std::mem::size_of::<T>()) as u64;
        Ok(TensorViewMut { raw, slice, offset_bytes, marker: PhantomData })
    }

    /// The view's shape (row-major, as given when it was made).
    pub fn shape(&self) -> &[usize] {
        &self.raw.shape
    }
}

impl<T: Element> std::fmt::Debug for TensorView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorView<{}>{:?} (+{} bytes)", self.raw.dtype, self.raw.shape, self.offset_bytes)
    }
}

impl<T: Element> std::fmt::Debug for TensorViewMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorViewMut<{}>{:?} (+{} bytes)", self.raw.dtype, self.raw.shape, self.offset_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_must_fit_in_its_slice_past_the_offset() {
        let fits = |len, offset, shape: &[usize]| check_fits(len, offset, shape, DType::F16, 2, "TensorView");
        assert!(fits(100, 0, &[10, 10]).is_ok());
        assert!(fits(100, 40, &[6, 10]).is_ok());
        assert!(fits(100, 100, &[0]).is_ok());
        assert!(fits(0, 0, &[0, 7]).is_ok());
        let e = fits(100, 41, &[6, 10]).unwrap_err().to_string();
        assert!(e.contains("shape [6, 10] needs 60 elements (120 bytes of f16)"), "{e}");
        assert!(e.contains("the slice has 59 past the offset 41 (100 in all)"), "{e}");
        let e = fits(100, 101, &[1]).unwrap_err().to_string();
        assert!(e.contains("the offset 101 is past the end of the slice (100 elements of f16)"), "{e}");
        let e = fits(100, 0, &[usize::MAX, 3]).unwrap_err().to_string();
        assert!(e.contains("more elements than fit in memory"), "{e}");
        assert!(matches!(fits(10, 0, &[11]), Err(Error::Shape { .. })));
    }

    #[test]
    fn a_view_keeps_16_byte_alignment() {
        assert!(check_offset_alignment(0, DType::F32, 4, "TensorView").is_ok());
        assert!(check_offset_alignment(4, DType::F32, 4, "TensorView").is_ok());
        assert!(check_offset_alignment(24, DType::F16, 2, "TensorView").is_ok());
        let e = check_offset_alignment(3, DType::F32, 4, "TensorView").unwrap_err().to_string();
        assert!(e.contains("the offset 3 (12 bytes) is not a multiple of 16 bytes (4 elements of f32)"), "{e}");
        let e = check_offset_alignment(12, DType::BF16, 2, "TensorViewMut").unwrap_err().to_string();
        assert!(e.starts_with("TensorViewMut: the offset 12 (24 bytes)") && e.contains("multiple of 8"), "{e}");
    }
}

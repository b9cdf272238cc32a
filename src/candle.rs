//! Launching tile kernels on candle's CUDA tensors (feature `candle`), with
//! no copy and on candle's own stream: inside a `candle_core::CustomOp1`'s
//! `cuda_fwd`, [`view`] turns the input's storage and layout into a
//! [`TensorView`], [`stream`] gives candle's stream, and [`output`] allocates
//! the result on candle's device for a [`TensorViewMut`] to write and
//! [`into_storage`] to hand back to candle.
//!
//! Every check is a [`tile::Error`](crate::Error) that says which: the
//! element type (`Error::Argument`), contiguity and the layout's offset
//! (`Error::Usage`; 16-byte alignment of the first element), the device
//! (`Error::DeviceMismatch`: a context other than the device's primary one).
//! The feature needs libcuda linked (`dynamic-linking`, which it turns on),
//! as candle's CUDA backend does: depend on tile with
//! `default-features = false, features = ["candle"]`.

use candle_core::backend::BackendStorage;
use candle_core::cuda::{CudaDType, CudaStorage};
use candle_core::Layout;

use crate::cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use crate::{Element, Error, Result, Stream, TensorView};

/// A tile stream on candle's CUDA stream for `storage`'s device: kernels
/// launched on it run in order with candle's own work.
pub fn stream(storage: &CudaStorage) -> Result<Stream> {
    Stream::from_cudarc(storage.device().cuda_stream())
}

/// `storage` (as laid out by `layout`) as a read-only tile tensor of `T`
/// with the layout's shape, from its start offset, with no copy.
pub fn view<'a, T: Element + CudaDType>(storage: &'a CudaStorage, layout: &Layout) -> Result<TensorView<'a, T>> {
    let slice: &CudaSlice<T> = storage.as_cuda_slice::<T>().map_err(|_| Error::Argument {
        kernel: String::new(),
        param: String::new(),
        message: format!("the candle tensor holds {:?}, the kernel takes {}", storage.dtype(), T::DTYPE),
    })?;
    if !layout.is_contiguous() {
        return Err(Error::Usage(format!(
            "the candle tensor of shape {:?} is not contiguous (strides {:?}); tile kernels take contiguous \
             row-major tensors: call `.contiguous()` first",
            layout.shape().dims(),
            layout.stride()
        )));
    }
    TensorView::with_offset(slice, layout.start_offset(), layout.shape().dims()).map_err(|e| match e {
        Error::Usage(m) => Error::Usage(format!(
            "the candle tensor's layout starts at element {}: {m} (`.copy()` makes a tensor that starts at 0)",
            layout.start_offset()
        )),
        other => other,
    })
}

/// A new zeroed allocation of `elements` elements of `T` on `storage`'s
/// device, for a kernel to write through a [`crate::TensorViewMut`].
pub fn output<T: Element + CudaDType + DeviceRepr + ValidAsZeroBits>(
    storage: &CudaStorage,
    elements: usize,
) -> Result<CudaSlice<T>> {
    storage
        .device()
        .alloc_zeros::<T>(elements)
        .map_err(|e| Error::Driver { call: "candle CudaDevice::alloc_zeros".into(), message: e.to_string() })
}

/// Hands `slice` (an [`output`] a kernel wrote) back to candle as the
/// storage of a `CustomOp`'s result.
pub fn into_storage<T: CudaDType>(slice: CudaSlice<T>, like: &CudaStorage) -> CudaStorage {
    CudaStorage::wrap_cuda_slice(slice, like.device().clone())
}

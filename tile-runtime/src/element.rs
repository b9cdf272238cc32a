//! Element types of device tensors: `f16`, `bf16`, `f32`, `i32`, `u32`.
//!
//! [`Element`] is sealed: only these plain-old-data types implement it, which
//! is what makes the byte views below sound (every bit pattern is a valid
//! value, there is no padding). Tensors are stored as little-endian bytes, the
//! layout of both the GPU and the interpreter; the crate refuses to build on a
//! big-endian host.

use half::{bf16, f16};
use tile_ir::DType;

#[cfg(target_endian = "big")]
compile_error!("tile-runtime stores tensors as little-endian bytes and needs a little-endian host");

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
    impl Sealed for u32 {}
}

/// A type that a [`DeviceTensor`](crate::DeviceTensor) can hold.
pub trait Element: sealed::Sealed + Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The Tile IR element type.
    const DTYPE: DType;
    /// The value as `f64` (exact for every element type).
    fn to_f64(self) -> f64;
    /// The nearest value of this type (ints saturate, NaN becomes 0, as `as`).
    fn from_f64(v: f64) -> Self;
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Element for i32 {
    const DTYPE: DType = DType::I32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as i32
    }
}

impl Element for u32 {
    const DTYPE: DType = DType::U32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as u32
    }
}

/// The bytes of a slice of elements (little-endian, as the device stores them).
pub(crate) fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: `T` is one of the sealed plain-old-data types: no padding, no
    // invalid bytes; `u8` has alignment 1; the length covers exactly `data`.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// The bytes of a mutable slice of elements.
pub(crate) fn as_bytes_mut<T: Element>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; in addition every byte pattern written through
    // the view is a valid `T` (all sealed types accept any bits).
    unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// Elements from little-endian bytes; `bytes.len()` is a multiple of the element size.
pub(crate) fn from_bytes<T: Element>(bytes: &[u8]) -> Vec<T> {
    let n = bytes.len() / std::mem::size_of::<T>();
    let mut out: Vec<T> = Vec::with_capacity(n);
    // SAFETY: `out` has capacity for `n` elements; every bit pattern is a
    // valid `T`; the copy initializes exactly `n * size_of::<T>()` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast::<u8>(), n * std::mem::size_of::<T>());
        out.set_len(n);
    }
    out
}

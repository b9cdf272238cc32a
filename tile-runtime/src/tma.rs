//! TMA tensor maps: the 128-byte `CUtensorMap` a Hopper kernel's
//! `cp.async.bulk.tensor` reads, encoded with `cuTensorMapEncodeTiled`
//! (cudarc's raw driver layer) and passed to the kernel by value.
//!
//! Expects a [`TensorMapSpec`] in the driver's order (dimensions innermost
//! first, byte strides for dims 1..). [`TensorMapSpec::validate`] checks
//! every rule the driver documents and says what to fix, so the driver's
//! bare `CUDA_ERROR_INVALID_VALUE` is never the first thing a user sees; it
//! needs no GPU. [`TensorMap::encode`] validates, then calls the driver with
//! interleave none and out-of-bounds fill none (elements outside the tensor
//! read as zero).
//!
//! Launch ABI: a tensor map is a `.param .align 64 .b8 name[128]` kernel
//! parameter; `cuLaunchKernel` copies its 128 bytes from the pointer in the
//! parameter array, which [`TensorMap::param_ptr`] gives (the map is
//! 64-byte aligned, as `CUtensorMap` is). Tensor maps come after every other
//! parameter (see ARCHITECTURE.md, "Launch ABI").

use crate::device::{describe, guarded, DeviceKind};
use crate::{Device, Error, Result};
use cudarc::driver::sys;
use tile_ir::DType;

/// The swizzle of a TMA box in shared memory (the span in bytes).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TmaSwizzle {
    None,
    B32,
    B64,
    B128,
}

impl TmaSwizzle {
    /// The span in bytes; `None` has no limit on the inner box extent.
    pub fn span(self) -> Option<u64> {
        match self {
            TmaSwizzle::None => None,
            TmaSwizzle::B32 => Some(32),
            TmaSwizzle::B64 => Some(64),
            TmaSwizzle::B128 => Some(128),
        }
    }
    /// The swizzle of span `bytes` (0 for none); `None` for other spans.
    pub fn from_bytes(bytes: u32) -> Option<TmaSwizzle> {
        match bytes {
            0 => Some(TmaSwizzle::None),
            32 => Some(TmaSwizzle::B32),
            64 => Some(TmaSwizzle::B64),
            128 => Some(TmaSwizzle::B128),
            _ => None,
        }
    }
    fn to_sys(self) -> sys::CUtensorMapSwizzle {
        match self {
            TmaSwizzle::None => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
            TmaSwizzle::B32 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
            TmaSwizzle::B64 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
            TmaSwizzle::B128 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        }
    }
}

/// How far TMA loads promote L2 fetches.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum L2Promotion {
    None,
    B64,
    B128,
    B256,
}

impl L2Promotion {
    fn to_sys(self) -> sys::CUtensorMapL2promotion {
        use sys::CUtensorMapL2promotion as P;
        match self {
            L2Promotion::None => P::CU_TENSOR_MAP_L2_PROMOTION_NONE,
            L2Promotion::B64 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
            L2Promotion::B128 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            L2Promotion::B256 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        }
    }
}

/// What `cuTensorMapEncodeTiled` needs, in its order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapSpec {
    pub dtype: DType,
    /// Device address of element 0 (16-byte aligned).
    pub global_address: u64,
    /// Extents, innermost (contiguous) first; 1 to 5 of them.
    pub dims: Vec<u64>,
    /// Byte strides of dims 1.. (`dims.len() - 1` of them; multiples of 16).
    pub strides: Vec<u64>,
    /// Box extents, innermost first (1..=256 each).
    pub box_dims: Vec<u32>,
    /// Traversal strides in elements (1..=8 each); all 1 for a dense box.
    pub element_strides: Vec<u32>,
    pub swizzle: TmaSwizzle,
    pub l2_promotion: L2Promotion,
}

fn dtype_to_sys(d: DType) -> sys::CUtensorMapDataType {
    use sys::CUtensorMapDataType as T;
    match d {
        DType::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::BF16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        DType::I32 => T::CU_TENSOR_MAP_DATA_TYPE_INT32,
        DType::U32 => T::CU_TENSOR_MAP_DATA_TYPE_UINT32,
        DType::I64 => T::CU_TENSOR_MAP_DATA_TYPE_INT64,
        // Booleans are stored as one byte.
        DType::Bool => T::CU_TENSOR_MAP_DATA_TYPE_UINT8,
    }
}

impl TensorMapSpec {
    /// A dense row-major tensor of `shape` (outermost first, as tensors are
    /// written in kernels) at `address`, with `box_shape` (same order),
    /// no L2 promotion: dims and strides are reversed into the driver's order.
    pub fn row_major(
        dtype: DType,
        address: u64,
        shape: &[u64],
        box_shape: &[u32],
        swizzle: TmaSwizzle,
    ) -> TensorMapSpec {
        let elem = dtype.size_bytes() as u64;
        let dims: Vec<u64> = shape.iter().rev().copied().collect();
        let mut strides = Vec::new();
        let mut s = elem;
        for d in dims.iter().take(dims.len().saturating_sub(1)) {
            s *= d;
            strides.push(s);
        }
        TensorMapSpec {
            dtype,
            global_address: address,
            dims,
            strides,
            box_dims: box_shape.iter().rev().copied().collect(),
            element_strides: vec![1; box_shape.len()],
            swizzle,
            l2_promotion: L2Promotion::None,
        }
    }

    /// Bytes one box occupies in shared memory (what an mbarrier expects).
    pub fn box_bytes(&self) -> u64 {
        self.box_dims.iter().map(|&b| b as u64).product::<u64>() * self.dtype.size_bytes() as u64
    }

    /// Checks the driver's rules; the error names the field and the fix.
    #[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Usage(format!("tensor map: {m}")));
        let rank = self.dims.len();
        let elem = self.dtype.size_bytes() as u64;
        if !(1..=5).contains(&rank) {
            return bad(format!("a tensor map has 1 to 5 dimensions; this one has {rank}"));
        }
        if self.strides.len() != rank - 1 {
            return bad(format!(
                "{rank} dimensions need {} byte strides (for dims 1..{rank}, innermost first); got {}",
                rank - 1,
                self.strides.len()
            ));
        }
        if self.box_dims.len() != rank || self.element_strides.len() != rank {
            return bad(format!(
                "{rank} dimensions need {rank} box extents and {rank} element strides; got {} and {}",
                self.box_dims.len(),
                self.element_strides.len()
            ));
        }
        if self.global_address % 16 != 0 {
            return bad(format!(
                "the global address {:#x} must be 16-byte aligned (offset the tensor by a multiple of 16 bytes)",
                self.global_address
            ));
        }
        for (i, &d) in self.dims.iter().enumerate() {
            if d == 0 || d > 1 << 32 {
                return bad(format!("dimension {i} (innermost first) has extent {d}; it must be 1..=2^32"));
            }
        }
        for (i, &s) in self.strides.iter().enumerate() {
            if s % 16 != 0 || s >= 1 << 40 {
                return bad(format!(
                    "the byte stride of dimension {} is {s}; it must be a multiple of 16 below 2^40 (pad rows to a multiple of {} elements)",
                    i + 1,
                    16 / elem.max(1)
                ));
            }
        }
        for (i, &b) in self.box_dims.iter().enumerate() {
            if b == 0 || b > 256 {
                return bad(format!(
                    "box extent {b} of dimension {i} must be 1..=256 (split the tile into several boxes)"
                ));
            }
        }
        for (i, &e) in self.element_strides.iter().enumerate() {
            if e == 0 || e > 8 {
                return bad(format!("element stride {e} of dimension {i} must be 1..=8"));
            }
        }
        let inner = self.box_dims[0] as u64 * elem;
        if inner % 16 != 0 {
            return bad(format!(
                "the box's inner extent is {inner} bytes ({} elements); it must be a multiple of 16 bytes",
                self.box_dims[0]
            ));
        }
        if let Some(span) = self.swizzle.span() {
            if inner > span {
                return bad(format!(
                    "the box's inner extent is {inner} bytes, more than the {span}-byte swizzle span; use a box of at most {} elements there",
                    span / elem
                ));
            }
        }
        Ok(())
    }
}

/// An encoded `CUtensorMap`: 128 opaque bytes, 64-byte aligned.
#[derive(Copy, Clone, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct TensorMap {
    bytes: [u8; 128],
}

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorMap({:02x?}..)", &self.bytes[..16])
    }
}

impl TensorMap {
    /// Validates `spec` and encodes it on `device` (interleave none,
    /// out-of-bounds elements read as zero).
    pub fn encode(device: &Device, spec: &TensorMapSpec) -> Result<TensorMap> {
        spec.validate()?;
        let cuda = match &device.kind {
            DeviceKind::Cuda(d) => d.clone(),
            DeviceKind::Interpreter => {
                return Err(Error::Usage(
                    "tensor maps are encoded by the CUDA driver; the CPU interpreter has none (use Device::cuda)"
                        .into(),
                ))
            }
        };
        if cuda.compute_capability.0 < 9 {
            return Err(Error::Usage(format!(
                "tensor maps (TMA) need compute capability 9.0 or later; device {} is sm_{}{}",
                cuda.ordinal, cuda.compute_capability.0, cuda.compute_capability.1
            )));
        }
        let dtype = dtype_to_sys(spec.dtype);
        let rank = spec.dims.len();
        // The driver reads strides for dims 1.. only.
        let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
        guarded("cuTensorMapEncodeTiled", || {
            cuda.ctx.bind_to_thread().map_err(crate::device::driver_err("cuCtxSetCurrent"))?;
            // SAFETY: every array has `rank` (strides `rank - 1`) elements, as
            // `validate` checked; `map` is a writable, aligned CUtensorMap.
            let status = unsafe {
                sys::cuTensorMapEncodeTiled(
                    map.as_mut_ptr(),
                    dtype,
                    rank as u32,
                    spec.global_address as *mut std::ffi::c_void,
                    spec.dims.as_ptr(),
                    spec.strides.as_ptr(),
                    spec.box_dims.as_ptr(),
                    spec.element_strides.as_ptr(),
                    sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                    spec.swizzle.to_sys(),
                    spec.l2_promotion.to_sys(),
                    sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
                )
            };
            status.result().map_err(|e| Error::Driver {
                call: "cuTensorMapEncodeTiled".into(),
                message: format!("{} (spec {spec:?})", describe(e)),
            })
        })?;
        // SAFETY: the driver wrote the map (and it was zeroed before).
        let map = unsafe { map.assume_init() };
        let mut bytes = [0u8; 128];
        for (i, w) in map.opaque.iter().enumerate() {
            bytes[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        Ok(TensorMap { bytes })
    }

    /// A map with these bytes (tests of the parameter layout).
    #[cfg(test)]
    pub(crate) fn from_bytes(bytes: [u8; 128]) -> TensorMap {
        TensorMap { bytes }
    }

    /// The 128 bytes the kernel receives.
    pub fn as_bytes(&self) -> &[u8; 128] {
        &self.bytes
    }

    /// The pointer to put in `cuLaunchKernel`'s parameter array for a
    /// `.param .align 64 .b8 name[128]` parameter: the driver copies 128
    /// bytes from it. Valid while `self` lives and does not move.
    pub fn param_ptr(&self) -> *mut std::ffi::c_void {
        self.bytes.as_ptr() as *mut std::ffi::c_void
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TensorMapSpec {
        // A [1000, 1999] f16 matrix padded to 2000 columns, box 64×64, 128B swizzle.
        TensorMapSpec {
            dtype: DType::F16,
            global_address: 0x7f00_0000_0000,
            dims: vec![1999, 1000],
            strides: vec![4000],
            box_dims: vec![64, 64],
            element_strides: vec![1, 1],
            swizzle: TmaSwizzle::B128,
            l2_promotion: L2Promotion::B128,
        }
    }

    fn err(s: &TensorMapSpec) -> String {
        s.validate().unwrap_err().to_string()
    }

    #[test]
    fn a_valid_spec_passes() {
        spec().validate().unwrap();
        assert_eq!(spec().box_bytes(), 8192);
    }

    #[test]
    fn each_rule_has_a_message_saying_what_to_fix() {
        let mut s = spec();
        s.global_address += 8;
        assert!(err(&s).contains("16-byte aligned"), "{}", err(&s));
        let mut s = spec();
        s.strides = vec![3998];
        assert!(
            err(&s).contains("multiple of 16") && err(&s).contains("pad rows to a multiple of 8 elements"),
            "{}",
            err(&s)
        );
        let mut s = spec();
        s.box_dims = vec![64, 257];
        assert!(err(&s).contains("1..=256"), "{}", err(&s));
        let mut s = spec();
        s.box_dims = vec![128, 64];
        assert!(err(&s).contains("128-byte swizzle span") && err(&s).contains("at most 64 elements"), "{}", err(&s));
        s.swizzle = TmaSwizzle::None;
        s.validate().unwrap();
        let mut s = spec();
        s.box_dims = vec![4, 64];
        assert!(err(&s).contains("multiple of 16 bytes"), "{}", err(&s));
        let mut s = spec();
        s.swizzle = TmaSwizzle::B64;
        assert!(err(&s).contains("64-byte swizzle span"), "{}", err(&s));
        s.box_dims = vec![32, 64];
        s.validate().unwrap();
        let mut s = spec();
        s.strides = vec![];
        assert!(err(&s).contains("need 1 byte strides"), "{}", err(&s));
        let mut s = spec();
        s.dims = vec![1; 6];
        assert!(err(&s).contains("1 to 5"), "{}", err(&s));
        let mut s = spec();
        s.dims[1] = 0;
        assert!(err(&s).contains("extent 0"), "{}", err(&s));
        let mut s = spec();
        s.element_strides = vec![1, 9];
        assert!(err(&s).contains("1..=8"), "{}", err(&s));
        let mut s = spec();
        s.box_dims = vec![64];
        assert!(err(&s).contains("box extents"), "{}", err(&s));
    }

    #[test]
    fn row_major_reverses_into_driver_order() {
        let s = TensorMapSpec::row_major(DType::BF16, 4096, &[3, 40, 1024], &[1, 16, 64], TmaSwizzle::B128);
        assert_eq!(s.dims, vec![1024, 40, 3]);
        assert_eq!(s.strides, vec![2048, 2048 * 40]);
        assert_eq!(s.box_dims, vec![64, 16, 1]);
        assert_eq!(s.element_strides, vec![1, 1, 1]);
        s.validate().unwrap();
        // 1999 f16 columns: the row stride is not a multiple of 16.
        let s = TensorMapSpec::row_major(DType::F16, 4096, &[1000, 1999], &[64, 64], TmaSwizzle::B128);
        assert!(err(&s).contains("3998"), "{}", err(&s));
    }

    #[test]
    fn the_map_is_128_bytes_64_aligned_and_the_interpreter_refuses() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>(), 64);
        assert_eq!(std::mem::size_of::<sys::CUtensorMap>(), 128);
        let m = TensorMap { bytes: [7; 128] };
        assert_eq!(m.param_ptr() as usize % 64, 0);
        assert_eq!(m.param_ptr() as *const u8, m.as_bytes().as_ptr());
        let e = TensorMap::encode(&Device::interpreter(), &spec()).unwrap_err();
        assert!(e.to_string().contains("Device::cuda"), "{e}");
        // Validation comes first, even on the interpreter.
        let mut s = spec();
        s.global_address = 3;
        assert!(TensorMap::encode(&Device::interpreter(), &s).unwrap_err().to_string().contains("aligned"));
    }
}

//! TMA tensor maps as data: [`TensorMapSpec`], what the driver's
//! `cuTensorMapEncodeTiled` takes, and [`TensorMap`], the 128-byte
//! `CUtensorMap` it returns, which a Hopper kernel's `cp.async.bulk.tensor`
//! reads and receives by value.
//!
//! Expects a [`TensorMapSpec`] in the driver's order (dimensions innermost
//! first, byte strides for dims 1..). [`TensorMapSpec::validate`] checks
//! every rule the driver documents and says what to fix, so the driver's
//! bare `CUDA_ERROR_INVALID_VALUE` is never the first thing a user sees; it
//! needs no GPU. Nothing here calls the driver: encoding on a device is
//! `tma.rs` ([`TensorMap::encode`]), so that the per-device cache of encoded
//! maps (`cache.rs`) can hold these types below `device.rs`.
//!
//! Launch ABI: a tensor map is a `.param .align 64 .b8 name[128]` kernel
//! parameter; `cuLaunchKernel` copies its 128 bytes from the pointer in the
//! parameter array, which [`TensorMap::param_ptr`] gives (the map is
//! 64-byte aligned, as `CUtensorMap` is). Tensor maps come after every other
//! parameter (see ARCHITECTURE.md, "Launch ABI").

use crate::error::{Error, Result};
use tile_ir::DType;

/// The swizzle of a TMA box in shared memory (the span in bytes).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TmaSwizzle {
    /// No swizzle.
    None,
    /// 32-byte swizzle.
    B32,
    /// 64-byte swizzle.
    B64,
    /// 128-byte swizzle.
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
}

/// How far TMA loads promote L2 fetches.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum L2Promotion {
    /// No promotion.
    None,
    /// To 64 bytes.
    B64,
    /// To 128 bytes.
    B128,
    /// To 256 bytes.
    B256,
}

/// What `cuTensorMapEncodeTiled` needs, in its order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapSpec {
    /// The element type.
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
    /// The box's swizzle in shared memory.
    pub swizzle: TmaSwizzle,
    /// How far loads promote L2 fetches.
    pub l2_promotion: L2Promotion,
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
    /// A map with these bytes: what the driver wrote, or a test's.
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
pub(crate) mod tests {
    use super::*;

    /// A valid spec (also `tma.rs`'s tests').
    pub(crate) fn spec() -> TensorMapSpec {
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
    fn the_map_is_128_bytes_and_64_aligned() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>(), 64);
        let m = TensorMap::from_bytes([7; 128]);
        assert_eq!(m.param_ptr() as usize % 64, 0);
        assert_eq!(m.param_ptr() as *const u8, m.as_bytes().as_ptr());
    }
}

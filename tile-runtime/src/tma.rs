//! Encoding TMA tensor maps on a device: [`TensorMap::encode`] validates a
//! [`TensorMapSpec`] (`tensor_map.rs`), then calls `cuTensorMapEncodeTiled`
//! (cudarc's raw driver layer) in the device's context.
//!
//! Expects a [`Device`] (a GPU of compute capability 9.0 or later; the
//! interpreter and older GPUs get [`Error::Usage`] saying so). Guarantees:
//! validation runs first, on any device, so a bad spec is reported by its
//! rule rather than by the driver's bare `CUDA_ERROR_INVALID_VALUE`; the map
//! is encoded with interleave none and out-of-bounds fill none (elements
//! outside the tensor read as zero); a driver failure or a binding panic is
//! an [`Error::Driver`].

use cudarc::driver::sys;
use tile_ir::DType;

use crate::device::{Device, DeviceKind};
use crate::driver::{describe, driver_err, guarded};
use crate::error::{Error, Result};
use crate::tensor_map::{L2Promotion, TensorMap, TensorMapSpec, TmaSwizzle};

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
            cuda.ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
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
                    swizzle_to_sys(spec.swizzle),
                    l2_promotion_to_sys(spec.l2_promotion),
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
        Ok(TensorMap::from_bytes(bytes))
    }
}

fn swizzle_to_sys(swizzle: TmaSwizzle) -> sys::CUtensorMapSwizzle {
    match swizzle {
        TmaSwizzle::None => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        TmaSwizzle::B32 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        TmaSwizzle::B64 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        TmaSwizzle::B128 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    }
}

fn l2_promotion_to_sys(promotion: L2Promotion) -> sys::CUtensorMapL2promotion {
    use sys::CUtensorMapL2promotion as P;
    match promotion {
        L2Promotion::None => P::CU_TENSOR_MAP_L2_PROMOTION_NONE,
        L2Promotion::B64 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        L2Promotion::B128 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        L2Promotion::B256 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor_map::tests::spec;

    #[test]
    fn the_driver_map_is_128_bytes_and_the_interpreter_refuses() {
        assert_eq!(std::mem::size_of::<sys::CUtensorMap>(), 128);
        let e = TensorMap::encode(&Device::interpreter(), &spec()).unwrap_err();
        assert!(e.to_string().contains("Device::cuda"), "{e}");
        // Validation comes first, even on the interpreter.
        let mut s = spec();
        s.global_address = 3;
        assert!(TensorMap::encode(&Device::interpreter(), &s).unwrap_err().to_string().contains("aligned"));
    }
}

//! What one GPU keeps between launches: the kernels loaded into its context
//! ([`LoadedKernel`], with a launch counter per variant) and the TMA tensor
//! maps encoded on it.
//!
//! Expects the caller (`launch/cuda.rs`) to load and encode; this file only
//! stores. Guarantees: a variant is loaded at most once per device (the
//! kernel cache stays locked while it loads, so two threads launching the
//! same kernel do not both JIT it); a module is unloaded when its
//! [`LoadedKernel`] is dropped, never earlier; a cached tensor map is exactly
//! what the driver would encode again for the same spec, since an encoding
//! depends on nothing else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::result;
use cudarc::driver::safe::CudaContext;
use cudarc::driver::sys;

use crate::error::Result;
use crate::tensor_map::{TensorMap, TensorMapSpec};

/// A kernel loaded into one device's context.
pub(crate) struct LoadedKernel {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) module: sys::CUmodule,
    pub(crate) function: sys::CUfunction,
    pub(crate) shared_bytes: u32,
    /// Launches issued with this variant ([`crate::Device::launch_counts`]).
    pub(crate) launches: AtomicU64,
}

// SAFETY: module and function handles are plain driver handles, usable from
// any thread once the owning context is current (every use binds it first).
unsafe impl Send for LoadedKernel {}
unsafe impl Sync for LoadedKernel {}

impl Drop for LoadedKernel {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the module was loaded by `launch/cuda.rs`'s `load_kernel` and is unloaded once, here.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

/// Loaded kernels of one device, keyed by the address of their
/// `&'static KernelMeta` and the variant's index in its `targets`.
#[derive(Default)]
pub(crate) struct KernelCache {
    kernels: Mutex<HashMap<(usize, usize), Arc<LoadedKernel>>>,
}

impl KernelCache {
    /// The kernel loaded for `key`, loading it with `load` the first time.
    pub(crate) fn get_or_load(
        &self,
        key: (usize, usize),
        load: impl FnOnce() -> Result<LoadedKernel>,
    ) -> Result<Arc<LoadedKernel>> {
        let mut cache = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(loaded) = cache.get(&key) {
            return Ok(loaded.clone());
        }
        let loaded = Arc::new(load()?);
        cache.insert(key, loaded.clone());
        Ok(loaded)
    }

    /// Launches so far of each of the `variants` variants of the kernel
    /// whose `&'static KernelMeta` is at `meta` (0 for one never loaded).
    pub(crate) fn launch_counts(&self, meta: usize, variants: usize) -> Vec<u64> {
        let cache = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        (0..variants).map(|v| cache.get(&(meta, v)).map_or(0, |l| l.launches.load(Ordering::Relaxed))).collect()
    }
}

/// Most encoded tensor maps a device keeps; past it the cache starts over.
const TENSOR_MAP_CACHE_LIMIT: usize = 4096;

/// Encoded TMA tensor maps of one device, keyed by their exact spec (an
/// encoding depends on nothing else).
#[derive(Default)]
pub(crate) struct TensorMapCache {
    maps: Mutex<HashMap<TensorMapSpec, TensorMap>>,
}

impl TensorMapCache {
    /// The map encoded before for `spec`, or `encode(&spec)`, kept for next
    /// time. GEMM benchmarks launch thousands of times on the same tensors,
    /// and `cuTensorMapEncodeTiled` is a host call. The cache is not locked
    /// while encoding.
    pub(crate) fn get_or_encode(
        &self,
        spec: TensorMapSpec,
        encode: impl FnOnce(&TensorMapSpec) -> Result<TensorMap>,
    ) -> Result<TensorMap> {
        if let Some(map) = self.maps.lock().unwrap_or_else(|e| e.into_inner()).get(&spec) {
            return Ok(*map);
        }
        let map = encode(&spec)?;
        let mut cache = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= TENSOR_MAP_CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(spec, map);
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::tensor_map::TmaSwizzle;
    use tile_ir::DType;

    #[test]
    fn a_tensor_map_is_encoded_once_per_spec_and_failures_are_not_kept() {
        let cache = TensorMapCache::default();
        let spec = |address| TensorMapSpec::row_major(DType::F16, address, &[64, 64], &[64, 64], TmaSwizzle::B128);
        let mut calls = 0;
        let mut encode = |s: &TensorMapSpec| {
            calls += 1;
            Ok(TensorMap::from_bytes([s.global_address as u8; 128]))
        };
        let first = cache.get_or_encode(spec(0x100), &mut encode).unwrap();
        assert_eq!(cache.get_or_encode(spec(0x100), &mut encode).unwrap(), first);
        assert_eq!(cache.get_or_encode(spec(0x200), &mut encode).unwrap().as_bytes()[0], 0);
        assert_eq!(calls, 2);
        let failed = cache.get_or_encode(spec(0x300), |_| Err(Error::Usage("no".into())));
        assert!(failed.is_err());
        let again = cache.get_or_encode(spec(0x300), |_| Ok(TensorMap::from_bytes([3; 128]))).unwrap();
        assert_eq!(again.as_bytes()[0], 3);
    }
}

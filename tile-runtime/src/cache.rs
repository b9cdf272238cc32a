//! What one GPU keeps between launches: the kernels loaded into its context
//! ([`LoadedKernel`], with a launch counter per variant) and the TMA tensor
//! maps encoded on it; and [`OnceMap`], the keyed load-once table that the
//! kernel cache and the table of opened devices are built on.
//!
//! Expects the caller (`launch/cuda.rs`, `device.rs`) to load and encode;
//! this file only stores. Guarantees, under any number of threads:
//! - a value of an [`OnceMap`] (a loaded variant, an opened device) is made at
//!   most once per key: concurrent first uses of one key wait for the one
//!   that loads, so nothing is loaded twice and leaked; a failed load stores
//!   nothing and the next use tries again;
//! - no lock covering more than one key is held while a value is made (a
//!   driver call: JIT, context creation), so loading one kernel never waits
//!   for another, and a load that itself uses the runtime cannot deadlock
//!   unless it asks for its own key;
//! - a lock poisoned by a panicking thread is recovered, never a panic: the
//!   tables only ever hold finished values (a value is inserted after its
//!   load returned), so what a poisoned lock guards is still consistent;
//! - a module is unloaded when its [`LoadedKernel`] is dropped, never earlier;
//!   a cached tensor map is exactly what the driver would encode again for
//!   the same spec, since an encoding depends on nothing else (two threads
//!   may both encode a new spec; the maps are equal plain bytes, so the
//!   second insert replaces the first and nothing leaks).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// The most threads a block of this function can have
    /// (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`: fewer than the device's
    /// limit when the function uses many registers per thread).
    pub(crate) max_threads: u32,
    /// Registers per thread (`CU_FUNC_ATTRIBUTE_NUM_REGS`), for messages.
    pub(crate) registers: u32,
    /// Blocks of this variant one SM runs at once
    /// (`cuOccupancyMaxActiveBlocksPerMultiprocessor` at its threads and
    /// shared memory; at least 1): a persistent variant's launch has this
    /// many per SM.
    pub(crate) blocks_per_sm: u32,
    /// Launches issued with this variant ([`crate::Device::launch_counts`]).
    pub(crate) launches: AtomicU64,
    /// What the module was loaded from ([`crate::Device::module_sources`]).
    pub(crate) source: ModuleSource,
}

/// What a loaded variant's module came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModuleSource {
    /// The embedded cubin (`KernelTarget::cubin`): no JIT.
    Cubin,
    /// The PTX, compiled by the driver's JIT.
    Ptx,
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

/// Locks `m`, recovering from poisoning: every table here holds only
/// finished values, so a panic elsewhere cannot leave it inconsistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A table of values made once per key, each by the first caller that needs
/// it (the module's guarantees). The table lock is held only to find a key's
/// slot; the slot's own lock is held while its value is made.
pub(crate) struct OnceMap<K, V> {
    slots: Mutex<HashMap<K, Arc<Slot<V>>>>,
}

/// One key's value: `None` until made.
type Slot<V> = Mutex<Option<Arc<V>>>;

impl<K, V> Default for OnceMap<K, V> {
    fn default() -> Self {
        OnceMap { slots: Mutex::new(HashMap::new()) }
    }
}

impl<K: Eq + Hash + Clone, V> OnceMap<K, V> {
    /// The value for `key`, made with `make` if no caller has made it yet.
    /// Concurrent callers with the same key wait for the one that makes it;
    /// an error is returned to that caller only and nothing is stored.
    pub(crate) fn get_or_try_init<E>(&self, key: &K, make: impl FnOnce() -> Result<V, E>) -> Result<Arc<V>, E> {
        let slot = lock(&self.slots).entry(key.clone()).or_default().clone();
        let mut value = lock(&slot);
        if let Some(v) = value.as_ref() {
            return Ok(v.clone());
        }
        let made = Arc::new(make()?);
        *value = Some(made.clone());
        Ok(made)
    }

    /// The value for `key` if it was made (waits while it is being made).
    pub(crate) fn get(&self, key: &K) -> Option<Arc<V>> {
        let slot = lock(&self.slots).get(key).cloned()?;
        let value = lock(&slot).clone();
        value
    }
}

/// Loaded kernels of one device, keyed by the address of their
/// `&'static KernelMeta` and the variant's index in its `targets`.
#[derive(Default)]
pub(crate) struct KernelCache {
    kernels: OnceMap<(usize, usize), LoadedKernel>,
}

impl KernelCache {
    /// The kernel loaded for `key`, loading it with `load` the first time
    /// (once, whatever the number of threads asking).
    pub(crate) fn get_or_load(
        &self,
        key: (usize, usize),
        load: impl FnOnce() -> Result<LoadedKernel>,
    ) -> Result<Arc<LoadedKernel>> {
        self.kernels.get_or_try_init(&key, load)
    }

    /// Launches so far of each of the `variants` variants of the kernel
    /// whose `&'static KernelMeta` is at `meta` (0 for one never loaded).
    pub(crate) fn launch_counts(&self, meta: usize, variants: usize) -> Vec<u64> {
        (0..variants).map(|v| self.kernels.get(&(meta, v)).map_or(0, |l| l.launches.load(Ordering::Relaxed))).collect()
    }

    /// What each of the `variants` variants of the kernel at `meta` was
    /// loaded from (`None` for one never loaded).
    pub(crate) fn module_sources(&self, meta: usize, variants: usize) -> Vec<Option<ModuleSource>> {
        (0..variants).map(|v| self.kernels.get(&(meta, v)).map(|l| l.source)).collect()
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
        if let Some(map) = lock(&self.maps).get(&spec) {
            return Ok(*map);
        }
        let map = encode(&spec)?;
        let mut cache = lock(&self.maps);
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
    use std::sync::atomic::AtomicUsize;
    use std::sync::Barrier;
    use tile_ir::DType;

    #[test]
    fn concurrent_first_uses_of_a_key_make_its_value_once() {
        let map: OnceMap<u32, String> = OnceMap::default();
        let made = AtomicUsize::new(0);
        let start = Barrier::new(8);
        let values: Vec<Arc<String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        map.get_or_try_init(&7, || {
                            made.fetch_add(1, Ordering::SeqCst);
                            // Long enough that the other threads arrive while it is made.
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            Ok::<_, ()>("seven".to_string())
                        })
                        .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(made.load(Ordering::SeqCst), 1);
        assert!(values.iter().all(|v| Arc::ptr_eq(v, &values[0]) && **v == "seven"));
        assert!(Arc::ptr_eq(&map.get(&7).unwrap(), &values[0]));
        assert!(map.get(&8).is_none());
    }

    #[test]
    fn a_failed_or_panicking_make_stores_nothing_and_poisons_nothing() {
        let map: OnceMap<u32, u32> = OnceMap::default();
        assert_eq!(map.get_or_try_init(&1, || Err("no")), Err("no"));
        assert!(map.get(&1).is_none());
        // A panic while the value is made poisons its slot's lock; the next
        // use recovers it and makes the value.
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = map.get_or_try_init(&1, || -> Result<u32, ()> { panic!("load failed") });
        }));
        assert!(panicked.is_err());
        assert!(map.get(&1).is_none());
        assert_eq!(*map.get_or_try_init(&1, || Ok::<_, ()>(5)).unwrap(), 5);
        assert_eq!(*map.get_or_try_init(&1, || Ok::<_, ()>(6)).unwrap(), 5);
        // Other keys are made meanwhile (a slot's lock covers one key).
        let slow = map.get_or_try_init(&2, || Ok::<_, ()>(*map.get_or_try_init(&3, || Ok::<_, ()>(9)).unwrap() + 1));
        assert_eq!(*slow.unwrap(), 10);
    }

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

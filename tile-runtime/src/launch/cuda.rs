//! The CUDA path: from checked arguments to `cuLaunchKernel`.
//!
//! Expects checked arguments (`args.rs`), bound dimensions and a non-empty
//! grid. In order: checks the thread block cluster against the grid (9.x
//! and later; devices without clusters ignore it, as it never changes what
//! a kernel computes); takes the tensors' device pointers on the launch's
//! stream (so that it waits for their last writes on other streams) and
//! picks the variant (`variant.rs`); checks its block against the device's
//! limits (`limits.rs`); loads it once per device (`cache.rs`), keeping
//! the driver's JIT log on failure and raising the dynamic shared-memory
//! limit once when needed; encodes the variant's tensor maps (cached per
//! device by their exact spec); checks the loaded function's thread limit
//! and the grid against the device (`limits.rs`); and launches on the
//! given stream with the variant's threads and the parameters in the
//! launch ABI order, with `cuLaunchKernelEx` and a cluster dimension when
//! clustered, and programmatic stream serialization for a dependent launch
//! (`tile_ir::Kernel::dependent_launch`) whose variant waits for it. A persistent variant gets as many blocks as the SMs hold at
//! once (SMs × its occupancy, `cuOccupancyMaxActiveBlocksPerMultiprocessor`
//! once at load; at most the grid's blocks) as a 1-D grid, unless clustered; any other launches the
//! user's grid, folded onto x when its y or z extent is past CUDA's 65,535
//! (`tile_ir::abi::launch_shape`).
//! Guarantees: every failure is an [`Error`] naming the kernel; a launch
//! that was issued counts once in [`Device::launch_counts`].

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::safe::{CudaStream, DevicePtrMut};
use cudarc::driver::{result, sys};
use tile_ir::{DType, Kernel};

use super::args::{abi_params, param_pointers, KernelArg};
use super::limits::{check_block, check_function, check_grid, DEFAULT_SHARED_LIMIT};
use super::meta::{KernelMeta, KernelTarget, TensorMapMeta};
use super::variant::{pick_variant, TensorPlace};
use crate::cache::{LoadedKernel, ModuleSource};
use crate::device::{CudaDevice, Device, DeviceKind};
use crate::driver::{describe, driver_err, guarded};
use crate::error::{Error, Result};
use crate::interop::TENSOR_ALIGN;
use crate::tensor_map::{L2Promotion, TensorMap, TensorMapSpec, TmaSwizzle};

/// The cluster shape to launch with: `None` when the kernel has none or the
/// device (compute capability `cc`) has no clusters, which never changes
/// the kernel's meaning. On 9.0 and later the grid must be a multiple of
/// the cluster on every axis (else the message says what to change).
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
fn launch_cluster(k: &Kernel, grid: [u32; 3], cc: (u32, u32)) -> std::result::Result<Option<[u32; 3]>, String> {
    let cluster = k.cluster;
    if cluster == [1, 1, 1] || cc.0 < 9 {
        return Ok(None);
    }
    if cluster.contains(&0) {
        return Err(format!("its cluster {cluster:?} has an extent of 0"));
    }
    let axes = ["x", "y", "z"];
    let bad: Vec<String> = (0..3)
        .filter(|&a| grid[a] % cluster[a] != 0)
        .map(|a| format!("{} = {} is not a multiple of {}", axes[a], grid[a], cluster[a]))
        .collect();
    if !bad.is_empty() {
        return Err(format!(
            "the grid {grid:?} must be a multiple of the thread block cluster ({}, {}, {}) on every axis, but {}; \
             make the grid's extents multiples of the cluster (e.g. round them up with cdiv and mask the extra blocks), \
             or change `cluster = (..)`",
            cluster[0],
            cluster[1],
            cluster[2],
            bad.join(" and ")
        ));
    }
    Ok(Some(cluster))
}

/// Checks that every tensor argument starts at a 16-byte aligned address
/// (`interop::TENSOR_ALIGN`): the generated code's vector accesses assume
/// it. Allocations always are; a view of memory owned elsewhere may not be
/// (a `CudaSlice` made from a raw pointer), and a misaligned vector access
/// would kill the context.
fn check_alignment(k: &Kernel, addresses: &[Option<u64>]) -> Result<()> {
    for (p, a) in k.params.iter().zip(addresses) {
        if let Some(a) = *a {
            if a % TENSOR_ALIGN != 0 {
                return Err(Error::Argument {
                    kernel: k.name.clone(),
                    param: p.name.clone(),
                    message: format!(
                        "the tensor starts at device address {a:#x}, which is not a multiple of {TENSOR_ALIGN} bytes; \
                         tile kernels need {TENSOR_ALIGN}-byte aligned tensors (views at offsets that keep it)"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The variant `variant` of `meta` loaded on `dev`, loaded the first time.
fn loaded_kernel(dev: &CudaDevice, meta: &'static KernelMeta, variant: usize, k: &Kernel) -> Result<Arc<LoadedKernel>> {
    let key = (meta as *const KernelMeta as usize, variant);
    dev.kernels.get_or_load(key, || load_kernel(dev, meta, &meta.targets[variant], k))
}

/// The driver's description of tensor map `m` over `tensor`: dense
/// row-major strides from its shape, the box and swizzle of the variant,
/// L2 promotion 256 bytes.
fn map_spec(m: &TensorMapMeta, tensor: TensorPlace<'_>) -> TensorMapSpec {
    let shape: Vec<u64> = tensor.shape.iter().map(|&d| d as u64).collect();
    let swizzle = TmaSwizzle::from_bytes(m.swizzle_bytes).unwrap_or(TmaSwizzle::None);
    let mut spec = TensorMapSpec::row_major(tensor.dtype, tensor.address, &shape, m.box_shape, swizzle);
    spec.l2_promotion = L2Promotion::B256;
    spec
}

/// Encodes `spec` on `dev`, or returns the map encoded before for the same
/// spec (`cache.rs`).
fn encoded_map(dev: &Arc<CudaDevice>, spec: TensorMapSpec) -> Result<TensorMap> {
    dev.tensor_maps.get_or_encode(spec, |spec| TensorMap::encode(&Device { kind: DeviceKind::Cuda(dev.clone()) }, spec))
}

const JIT_LOG_BYTES: usize = 16 * 1024;

/// JIT-compiles and loads the PTX of `target`, keeping the driver's logs on
/// failure; `cubin_failure` (why the embedded cubin did not load) joins the
/// error when both fail.
fn jit_ptx(
    meta: &'static KernelMeta,
    target: &KernelTarget,
    k: &Kernel,
    cubin_failure: Option<String>,
) -> Result<sys::CUmodule> {
    let ptx = CString::new(target.ptx).map_err(|_| Error::InvalidMeta {
        kernel: meta.name.to_string(),
        message: "the PTX contains a NUL byte".into(),
    })?;
    let mut error_log = vec![0u8; JIT_LOG_BYTES];
    let mut info_log = vec![0u8; JIT_LOG_BYTES];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ];
    // Size options pass their value in the pointer itself (driver API convention).
    let mut values: [*mut c_void; 4] = [
        error_log.as_mut_ptr().cast(),
        JIT_LOG_BYTES as *mut c_void,
        info_log.as_mut_ptr().cast(),
        JIT_LOG_BYTES as *mut c_void,
    ];
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `ptx` is NUL-terminated; the option arrays have 4 entries; the
    // log buffers outlive the call and their sizes are given.
    let status = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            ptx.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        let text = |buf: &[u8]| {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            String::from_utf8_lossy(&buf[..end]).trim().to_string()
        };
        let mut log = describe(cudarc::driver::DriverError(status));
        for part in [text(&error_log), text(&info_log)] {
            if !part.is_empty() {
                log.push('\n');
                log.push_str(&part);
            }
        }
        log.push_str(if status == sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION {
            "\nhint: the PTX's ISA version is newer than this NVIDIA driver accepts; update the driver"
        } else {
            "\nhint: this is a bug in the tile compiler; build with TILE_DUMP=<dir> to inspect the PTX, \
             and with TILE_PTXAS=<ptxas> to catch it at build time"
        });
        if let Some(failure) = cubin_failure {
            log.push_str(&format!("\nthe embedded {} cubin failed to load too: {failure}", target.arch));
        }
        return Err(Error::Jit { kernel: k.name.clone(), arch: target.arch.to_string(), log });
    }
    Ok(module)
}

/// The embedded cubin of `target` to load on a device of compute
/// capability `cc`, if any: one was embedded (`TILE_PTXAS` at build time),
/// the device runs its SASS (`tile_ir::Target::cubin_runs_on`) and
/// `TILE_NO_CUBIN` is not set to a non-empty value other than `0` (it forces
/// the JIT, to compare the two).
fn usable_cubin(target: &KernelTarget, cc: (u32, u32), no_cubin: Option<&str>) -> Option<&'static [u8]> {
    let forced_off = no_cubin.is_some_and(|v| !v.trim().is_empty() && v.trim() != "0");
    let runs = tile_ir::Target::from_name(target.arch).is_some_and(|t| t.cubin_runs_on(cc.0, cc.1));
    target.cubin.filter(|_| runs && !forced_off)
}

/// Loads `cubin` (an ELF image) as a module; the driver's message on failure.
/// The blocks of a persistent launch when the grid has at least as many:
/// every SM full (`blocks_per_sm` each, at least 1).
fn persistent_blocks(multiprocessors: u32, blocks_per_sm: u32) -> u64 {
    multiprocessors.max(1) as u64 * blocks_per_sm.max(1) as u64
}

fn load_cubin(cubin: &[u8]) -> std::result::Result<sys::CUmodule, String> {
    // The driver reads the ELF image in place: give it 8-byte alignment,
    // which a byte string in the binary does not promise.
    let mut image = vec![0u64; cubin.len().div_ceil(8)];
    // SAFETY: `image` has at least `cubin.len()` bytes; the two do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(cubin.as_ptr(), image.as_mut_ptr().cast::<u8>(), cubin.len()) };
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `image` holds a complete ELF image and outlives the call (the
    // driver copies what it keeps).
    unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) }.result().map(|()| module).map_err(describe)
}

fn load_kernel(dev: &CudaDevice, meta: &'static KernelMeta, target: &KernelTarget, k: &Kernel) -> Result<LoadedKernel> {
    let launch_err = |message: String| Error::Launch { kernel: k.name.clone(), message };
    let entry = CString::new(k.name.as_str()).map_err(|_| Error::InvalidMeta {
        kernel: meta.name.to_string(),
        message: "the name contains a NUL byte".into(),
    })?;
    dev.ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
    let no_cubin = std::env::var("TILE_NO_CUBIN").ok();
    let mut cubin_failure = None;
    let mut loaded_cubin = None;
    if let Some(cubin) = usable_cubin(target, dev.compute_capability, no_cubin.as_deref()) {
        match load_cubin(cubin) {
            Ok(module) => loaded_cubin = Some(module),
            Err(message) => cubin_failure = Some(message),
        }
    }
    let (module, source) = match loaded_cubin {
        Some(module) => (module, ModuleSource::Cubin),
        None => (jit_ptx(meta, target, k, cubin_failure)?, ModuleSource::Ptx),
    };
    let mut loaded = LoadedKernel {
        ctx: dev.ctx.clone(),
        module,
        function: std::ptr::null_mut(),
        shared_bytes: target.shared_bytes,
        max_threads: 0,
        registers: 0,
        blocks_per_sm: 1,
        launches: AtomicU64::new(0),
        source,
    };
    // SAFETY: `module` was just loaded; `entry` is NUL-terminated.
    loaded.function = unsafe { result::module::get_function(module, entry) }.map_err(|e| {
        let from = if source == ModuleSource::Cubin { "cubin" } else { "PTX" };
        launch_err(format!("the {from} for {} has no entry `{}`: {}", target.arch, k.name, describe(e)))
    })?;
    let function_attribute = |a: sys::CUfunction_attribute| {
        // SAFETY: `function` belongs to the loaded module; the context is current.
        unsafe { result::function::get_function_attribute(loaded.function, a) }
            .map(|v| v.max(0) as u32)
            .map_err(driver_err("cuFuncGetAttribute"))
    };
    let max_threads = function_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
    let registers = function_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)?;
    (loaded.max_threads, loaded.registers) = (max_threads, registers);
    if target.shared_bytes > DEFAULT_SHARED_LIMIT {
        // SAFETY: `function` belongs to the loaded module; the context is current.
        unsafe {
            result::function::set_function_attribute(
                loaded.function,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                target.shared_bytes as i32,
            )
        }
        .map_err(driver_err("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"))?;
    }
    if target.persistent {
        // SAFETY: `function` belongs to the loaded module; the context is current.
        let blocks = unsafe {
            result::occupancy::max_active_block_per_multiprocessor(
                loaded.function,
                target.threads as std::ffi::c_int,
                target.shared_bytes as usize,
            )
        }
        .map_err(driver_err("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
        loaded.blocks_per_sm = blocks.max(1) as u32;
    }
    Ok(loaded)
}

/// Whether `TILE_PERSISTENT_STATIC` asks for the static tile stride (a
/// non-empty value other than `0`): the dynamic tile scheduler's variants
/// get a null counter (to compare the two in one run).
fn static_tiles_requested() -> bool {
    std::env::var("TILE_PERSISTENT_STATIC").is_ok_and(|v| !v.trim().is_empty() && v.trim() != "0")
}

#[allow(clippy::too_many_arguments)]
pub(super) fn launch_cuda(
    dev: &Arc<CudaDevice>,
    stream: &Arc<CudaStream>,
    tile_counter: &crate::device::TileCounter,
    meta: &'static KernelMeta,
    k: &Kernel,
    args: &mut [KernelArg<'_>],
    dims: &[i64],
    grid: [u32; 3],
) -> Result<()> {
    let launch_err = |message: String| Error::Launch { kernel: k.name.clone(), message };
    let cluster = launch_cluster(k, grid, dev.compute_capability).map_err(launch_err)?;
    // Shapes and element types of the tensors that some variant maps (the
    // arguments are borrowed by the access guards below).
    let mapped: Vec<Option<(Vec<usize>, DType)>> = if meta.targets.iter().any(|t| !t.tensor_maps.is_empty()) {
        args.iter().map(|a| a.raw().map(|t| (t.shape.clone(), t.dtype))).collect()
    } else {
        Vec::new()
    };
    let (mut slots, _access_guards, addresses) = abi_params(k, args, dims, Some(stream));
    check_alignment(k, &addresses)?;
    let places: Vec<Option<TensorPlace<'_>>> = mapped
        .iter()
        .zip(&addresses)
        .map(|(m, a)| match (m, a) {
            (Some((shape, dtype)), Some(address)) => Some(TensorPlace { address: *address, shape, dtype: *dtype }),
            _ => None,
        })
        .collect();
    let variant = pick_variant(meta, k, dev.compute_capability, &places)?;
    let target = &meta.targets[variant];
    check_block(target, &dev.limits, &dev.name).map_err(launch_err)?;
    let loaded = loaded_kernel(dev, meta, variant, k)?;
    check_function(target, loaded.max_threads, loaded.registers).map_err(launch_err)?;
    let grid = if target.persistent && cluster.is_none() {
        let blocks = grid.iter().map(|&g| g as u64).product::<u64>();
        if blocks > i32::MAX as u64 {
            // Its tiles are counted in 32 bits (`ctaid.x + i·nctaid.x`).
            return Err(launch_err(format!(
                "the grid {grid:?} has {blocks} blocks, more than the 2147483647 (2^31 - 1) tiles the persistent \
                 variant `{}` counts; give each block more work (larger tiles), split the launch, or skip the \
                 variant with TILE_SKIP_SCHEDULES={}",
                target.schedule, target.schedule
            )));
        }
        [blocks.min(persistent_blocks(dev.multiprocessors, loaded.blocks_per_sm)) as u32, 1, 1]
    } else {
        // The user's grid, or every block on x when an axis is past CUDA's
        // limit (the kernel unfolds it: `tile_ir::abi::folds_grid`).
        tile_ir::abi::launch_shape(k, grid)
    };
    // Kept alive until the launch call returns: the driver copies the 128
    // bytes of each map from these addresses.
    let mut maps = Vec::with_capacity(target.tensor_maps.len());
    for m in target.tensor_maps {
        let Some(place) = places.get(m.tensor).copied().flatten() else {
            return Err(Error::InvalidMeta {
                kernel: k.name.clone(),
                message: format!("a tensor map names parameter {}, which is not a tensor", m.tensor),
            });
        };
        let map = encoded_map(dev, map_spec(m, place)).map_err(|e| {
            launch_err(format!("cannot encode the TMA tensor map of tensor `{}`: {e}", k.params[m.tensor].name))
        })?;
        maps.push(map);
    }
    check_grid(grid, &dev.limits, &dev.name).map_err(launch_err)?;
    // The dynamic tile scheduler's counter (`tile_ir::abi::TILE_COUNTER_PARAM`,
    // after the other parameters): the stream's, zeroed on the stream right
    // before the launch and locked until it is issued; null under
    // TILE_PERSISTENT_STATIC.
    let takes_counter = tile_ir::abi::takes_tile_counter(target.schedule);
    let mut counter_lock =
        (takes_counter && !static_tiles_requested()).then(|| tile_counter.lock().unwrap_or_else(|e| e.into_inner()));
    let mut _counter_use = None;
    if takes_counter {
        let mut address = 0u64;
        if let Some(held) = counter_lock.as_mut() {
            if held.is_none() {
                let fresh = stream.alloc_zeros::<u32>(1).map_err(driver_err("cuMemAllocAsync (tile counter)"))?;
                **held = Some(fresh);
            }
            if let Some(slice) = held.as_mut() {
                stream.memset_zeros(slice).map_err(driver_err("cuMemsetD8Async (tile counter)"))?;
                // The guard records the kernel's use of the counter when
                // dropped, after the launch below.
                let (ptr, used) = slice.device_ptr_mut(stream);
                address = ptr;
                _counter_use = Some(used);
            }
        }
        slots.push(super::args::ParamSlot::new(&address.to_le_bytes()));
    }
    // A traced build's buffer (`tile_ir::abi::TRACE_PARAM`, after the
    // counter), zeroed; its timeline is written after the launch
    // (`trace.rs`).
    let mut trace = None;
    let mut _trace_use = None;
    if tile_ir::abi::takes_trace(target.ptx) {
        let buf = trace.insert(
            stream.alloc_zeros::<u64>(super::trace::TRACE_WORDS).map_err(driver_err("cuMemAllocAsync (trace)"))?,
        );
        let (ptr, used) = buf.device_ptr_mut(stream);
        slots.push(super::args::ParamSlot::new(&ptr.to_le_bytes()));
        _trace_use = Some(used);
    }
    let mut pointers = param_pointers(&mut slots, &maps);
    dev.ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
    // A programmatic dependent (`Kernel::dependent_launch`) gets the launch
    // attribute only where its variant begins with `griddepcontrol.wait`
    // (a target with the feature): without the wait it could read what the
    // kernel before it is still writing.
    let dependent = k.dependent_launch
        && tile_ir::Target::from_name(target.arch).is_some_and(|t| t.has(tile_ir::target::Feature::GridDependency));
    let launched = if cluster.is_none() && !dependent {
        // SAFETY: `function` is live (held by `loaded`); `pointers` has one
        // entry per PTX parameter, each pointing at a slot or a tensor map
        // that outlives the call (the driver copies parameters at launch);
        // the tensors are borrowed by `args` for the duration, and writable
        // ones exclusively.
        unsafe {
            result::launch_kernel(
                loaded.function,
                (grid[0], grid[1], grid[2]),
                (target.threads, 1, 1),
                loaded.shared_bytes,
                stream.cu_stream(),
                &mut pointers,
            )
        }
        .map_err(|e| launch_err(format!("cuLaunchKernel failed: {}", describe(e))))
    } else {
        guarded("cuLaunchKernelEx", || {
            let mut attributes = Vec::new();
            if let Some(cluster) = cluster {
                // SAFETY: an all-zero launch attribute is a valid value of
                // this plain C struct; the cluster fields are set next.
                let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
                attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
                attribute.value.clusterDim =
                    sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: cluster[0], y: cluster[1], z: cluster[2] };
                attributes.push(attribute);
            }
            if dependent {
                // SAFETY: as above; the one field of this attribute is set next.
                let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
                attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
                attribute.value.programmaticStreamSerializationAllowed = 1;
                attributes.push(attribute);
            }
            let config = sys::CUlaunchConfig {
                gridDimX: grid[0],
                gridDimY: grid[1],
                gridDimZ: grid[2],
                blockDimX: target.threads,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: loaded.shared_bytes,
                hStream: stream.cu_stream(),
                attrs: attributes.as_mut_ptr(),
                numAttrs: attributes.len() as u32,
            };
            // SAFETY: as for cuLaunchKernel above; `config` and `attributes`
            // outlive the call.
            unsafe { sys::cuLaunchKernelEx(&config, loaded.function, pointers.as_mut_ptr(), std::ptr::null_mut()) }
                .result()
                .map_err(|e| {
                    launch_err(format!(
                        "cuLaunchKernelEx (cluster {cluster:?}, dependent launch {dependent}) failed: {}",
                        describe(e)
                    ))
                })
        })
    };
    drop(_counter_use);
    drop(counter_lock);
    drop(_trace_use);
    if launched.is_ok() {
        loaded.launches.fetch_add(1, Ordering::Relaxed);
    }
    launched?;
    if let (Some(buf), Some(path)) = (trace, super::trace::trace_path(&k.name)) {
        let mut words = vec![0u64; super::trace::TRACE_WORDS];
        stream.memcpy_dtoh(&buf, &mut words).map_err(driver_err("cuMemcpyDtoHAsync (trace)"))?;
        stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
        std::fs::write(&path, super::trace::chrome_trace(target.ptx, &words))
            .map_err(|e| launch_err(format!("cannot write the trace to {path} (TILE_TRACE): {e}")))?;
    }
    Ok(())
}

impl Device {
    /// How many launches of the kernel `meta` each of its compiled variants
    /// (`meta.targets`, in order) ran on this GPU so far; all zeros on the
    /// interpreter. For tests and benchmarks that must know which variant ran
    /// (a warp-specialized TMA variant runs only on TMA-addressable tensors;
    /// otherwise the runtime falls back silently to the general one).
    pub fn launch_counts(&self, meta: &'static KernelMeta) -> Vec<u64> {
        match &self.kind {
            DeviceKind::Interpreter => vec![0; meta.targets.len()],
            DeviceKind::Cuda(d) => d.kernels.launch_counts(meta as *const KernelMeta as usize, meta.targets.len()),
        }
    }

    /// What each compiled variant of the kernel `meta` (`meta.targets`, in
    /// order) was loaded from on this GPU: [`ModuleSource::Cubin`] (the
    /// embedded SASS, no JIT) or [`ModuleSource::Ptx`]; `None` for a variant
    /// not loaded yet, and all `None` on the interpreter.
    pub fn module_sources(&self, meta: &'static KernelMeta) -> Vec<Option<ModuleSource>> {
        match &self.kind {
            DeviceKind::Interpreter => vec![None; meta.targets.len()],
            DeviceKind::Cuda(d) => d.kernels.module_sources(meta as *const KernelMeta as usize, meta.targets.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::gemm_like;
    use super::*;

    #[test]
    fn a_map_spec_comes_from_the_tensor_and_the_variant() {
        let m = TensorMapMeta { tensor: 0, box_shape: &[128, 64], swizzle_bytes: 128 };
        let shape = [1000, 4096];
        let spec = map_spec(&m, TensorPlace { address: 0x7000, shape: &shape, dtype: DType::BF16 });
        assert_eq!(spec.dtype, DType::BF16);
        assert_eq!(spec.global_address, 0x7000);
        assert_eq!(spec.dims, vec![4096, 1000]);
        assert_eq!(spec.strides, vec![8192]);
        assert_eq!(spec.box_dims, vec![64, 128]);
        assert_eq!(spec.swizzle, TmaSwizzle::B128);
        assert_eq!(spec.l2_promotion, L2Promotion::B256);
        spec.validate().unwrap();
        let m = TensorMapMeta { tensor: 0, box_shape: &[2, 16, 32], swizzle_bytes: 0 };
        let spec = map_spec(&m, TensorPlace { address: 0x100, shape: &[3, 40, 96], dtype: DType::F32 });
        assert_eq!((spec.dims, spec.strides, spec.box_dims), (vec![96, 40, 3], vec![384, 384 * 40], vec![32, 16, 2]));
        assert_eq!(spec.swizzle, TmaSwizzle::None);
    }

    /// The boxes of the `tma_copy` variant of tiles with squeezed dims
    /// (extent 1 there): K of `[b, s, h, d]` (4-D) and a 5-D tensor encode
    /// with one stride per outer dim and the box of the 2-D tile's bytes.
    #[test]
    fn map_specs_of_squeezed_boxes_of_4d_and_5d_tensors() {
        let m = TensorMapMeta { tensor: 1, box_shape: &[1, 64, 1, 64], swizzle_bytes: 128 };
        let spec = map_spec(&m, TensorPlace { address: 0x200, shape: &[2, 77, 3, 64], dtype: DType::F16 });
        assert_eq!(spec.dims, vec![64, 3, 77, 2]);
        assert_eq!(spec.strides, vec![128, 128 * 3, 128 * 3 * 77]);
        assert_eq!(spec.box_dims, vec![64, 1, 64, 1]);
        assert_eq!(spec.box_bytes(), 64 * 64 * 2);
        spec.validate().unwrap();
        let m = TensorMapMeta { tensor: 0, box_shape: &[1, 1, 32, 1, 64], swizzle_bytes: 128 };
        let spec = map_spec(&m, TensorPlace { address: 0x400, shape: &[2, 2, 40, 2, 64], dtype: DType::F16 });
        assert_eq!(spec.box_dims, vec![64, 1, 32, 1, 1]);
        assert_eq!(spec.strides, vec![128, 256, 256 * 40, 256 * 80]);
        assert_eq!(spec.box_bytes(), 32 * 64 * 2);
        spec.validate().unwrap();
    }

    /// A persistent launch fills every SM with as many blocks as it holds
    /// (an occupancy of 0 reported still launches one per SM).
    #[test]
    fn persistent_launches_fill_the_sms() {
        assert_eq!(persistent_blocks(132, 1), 132);
        assert_eq!(persistent_blocks(132, 2), 264);
        assert_eq!(persistent_blocks(132, 0), 132);
        assert_eq!(persistent_blocks(0, 3), 3);
    }

    #[test]
    fn misaligned_tensor_addresses_are_refused_before_the_launch() {
        let k = gemm_like();
        assert!(check_alignment(&k, &[Some(0x7000), None, Some(0x7010)]).is_ok());
        match check_alignment(&k, &[Some(0x7000), None, Some(0x700c)]) {
            Err(Error::Argument { param, message, .. }) => {
                assert_eq!(param, "c");
                assert!(message.contains("0x700c, which is not a multiple of 16 bytes"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_cubin_is_used_where_its_sass_runs_unless_turned_off() {
        use super::super::fixtures::target;
        const ELF: &[u8] = b"\x7fELF\x02 a cubin";
        let with = |arch| KernelTarget { cubin: Some(ELF), ..target(arch, 128, &[]) };
        let (sm80, sm90a) = (with("sm_80"), with("sm_90a"));
        assert_eq!(usable_cubin(&sm80, (8, 0), None), Some(ELF));
        assert_eq!(usable_cubin(&sm80, (8, 9), None), Some(ELF));
        // The sm_80 PTX runs on 9.0 and 10.0 through the JIT, its SASS does not.
        assert_eq!(usable_cubin(&sm80, (9, 0), None), None);
        assert_eq!(usable_cubin(&sm80, (10, 0), None), None);
        assert_eq!(usable_cubin(&sm90a, (9, 0), None), Some(ELF));
        assert_eq!(usable_cubin(&sm90a, (10, 0), None), None);
        // TILE_NO_CUBIN forces the JIT; empty or 0 leaves the cubin on.
        assert_eq!(usable_cubin(&sm90a, (9, 0), Some("1")), None);
        assert_eq!(usable_cubin(&sm90a, (9, 0), Some("0")), Some(ELF));
        assert_eq!(usable_cubin(&sm90a, (9, 0), Some("")), Some(ELF));
        // No cubin embedded (built without TILE_PTXAS), or an unknown arch.
        assert_eq!(usable_cubin(&target("sm_90a", 128, &[]), (9, 0), None), None);
        assert_eq!(usable_cubin(&with("sm_70"), (7, 0), None), None);
    }

    #[test]
    fn the_grid_must_be_a_multiple_of_the_cluster_on_hopper() {
        let mut k = gemm_like();
        assert_eq!(launch_cluster(&k, [7, 3, 1], (9, 0)), Ok(None));
        k.cluster = [2, 1, 1];
        assert_eq!(launch_cluster(&k, [8, 3, 1], (9, 0)), Ok(Some([2, 1, 1])));
        let e = launch_cluster(&k, [7, 3, 1], (9, 0)).unwrap_err();
        assert!(e.contains("x = 7 is not a multiple of 2") && e.contains("cluster (2, 1, 1)"), "{e}");
        // Devices without clusters ignore it: it never changes the results.
        assert_eq!(launch_cluster(&k, [7, 3, 1], (8, 0)), Ok(None));
        k.cluster = [2, 2, 2];
        let e = launch_cluster(&k, [4, 3, 5], (9, 0)).unwrap_err();
        assert!(e.contains("y = 3 is not a multiple of 2 and z = 5 is not a multiple of 2"), "{e}");
        assert!(!e.contains("x = 4"), "{e}");
        assert_eq!(launch_cluster(&k, [4, 6, 2], (10, 0)), Ok(Some([2, 2, 2])));
        // As a launch error it names the kernel.
        let err = Error::Launch { kernel: k.name.clone(), message: e };
        assert!(err.to_string().starts_with("cannot launch kernel `mm`: the grid [4, 3, 5]"), "{err}");
    }
}

//! Kernel metadata, arguments and the launch path shared by every generated
//! `launch` wrapper.
//!
//! `#[tile_kernel]` embeds a [`KernelMeta`] (the Tile IR as JSON and the PTX
//! of each target, possibly several variants per target) in a `static`, and
//! its wrapper calls [`launch`] with one [`KernelArg`] per parameter. `launch`:
//! 1. parses the IR once per `KernelMeta` (cached by the static's address) and
//!    checks that it describes a launchable signature and that every
//!    variant's tensor maps name tensor parameters of the right rank;
//! 2. checks the arguments' number, kind, element type, mutability and device;
//! 3. binds the dynamic dimensions from the tensor shapes and evaluates the
//!    grid (`tile_ir::abi`, the same code for both paths); an empty grid does
//!    nothing;
//! 4. runs the kernel on the interpreter, or on the GPU: picks the target arch
//!    for the device (sm_90a on 9.x, else sm_80) and, among that arch's
//!    variants (preferred first), the first whose mapped tensors are all
//!    TMA-addressable (`tile_ir::abi::tma_addressable`); checks the thread
//!    block cluster against the grid (9.x and later); loads the variant once
//!    per device (keeping the driver's JIT log on failure), raises the dynamic
//!    shared-memory limit once when needed, encodes the variant's tensor maps
//!    (cached per device by their exact spec), and launches with the
//!    variant's threads and the parameters in the launch ABI order, tensor
//!    maps last (`cuLaunchKernelEx` with a cluster dimension when clustered).
//!
//! The cluster never changes what a kernel computes (`Kernel::cluster`), so
//! devices without clusters (before 9.0) and the interpreter ignore it.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::safe::{CudaContext, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use cudarc::driver::{result, sys};
use half::{bf16, f16};
use tile_ir::interp::{Arg as InterpArg, TensorData};
use tile_ir::{DType, Kernel, ParamKind, Value};

use crate::device::{describe, driver_err, guarded, CudaDevice, DeviceKind, Stream};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::tensor::{DeviceTensor, RawTensor, Storage};
use crate::tma::{L2Promotion, TensorMap, TensorMapSpec, TmaSwizzle};

/// What `#[tile_kernel]` embeds for one kernel.
#[derive(Debug)]
pub struct KernelMeta {
    /// The kernel's name (the PTX entry point).
    pub name: &'static str,
    /// The kernel's Tile IR, as JSON (`tile_ir::Kernel`).
    pub ir: &'static str,
    /// The PTX for each target the kernel was built for.
    pub targets: &'static [KernelTarget],
}

/// One kernel compiled for one target: one variant. Several entries of
/// [`KernelMeta::targets`] may share an arch; they are then variants,
/// preferred first, and the last of an arch has no tensor maps.
#[derive(Debug)]
pub struct KernelTarget {
    /// `sm_80` or `sm_90a`.
    pub arch: &'static str,
    pub ptx: &'static str,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    /// Threads per block at launch: the kernel's `threads`, or more for a
    /// warp-specialized variant (its producer warpgroup). 1..=1024.
    pub threads: u32,
    /// The TMA tensor maps the variant takes after all its other parameters,
    /// in this order (ARCHITECTURE.md, "Launch ABI"). A variant with maps
    /// runs only when every mapped tensor is TMA-addressable.
    pub tensor_maps: &'static [TensorMapMeta],
    /// A persistent variant (`tile_ir::Compiled::persistent`): its blocks
    /// loop over the grid's blocks, so it is launched with one block per
    /// SM (at most the grid's block count) as a 1-D grid, unless the kernel
    /// asks for clusters (then with the whole grid: one tile per block).
    pub persistent: bool,
}

/// One TMA tensor map a compiled variant takes (`tile_ir::abi::TensorMapUse`
/// as embedded by `#[tile_kernel]`). At launch the runtime encodes it from
/// the tensor argument: its device address, its shape with dense row-major
/// strides, this box and swizzle, L2 promotion 256 bytes, out-of-bounds
/// elements reading as zero.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapMeta {
    /// Index into the kernel's parameters of the tensor parameter it maps.
    pub tensor: usize,
    /// Box extents in elements, outermost first (the tensor's dim order);
    /// as many as the tensor has dims.
    pub box_shape: &'static [u32],
    /// The box's swizzle span in shared memory, in bytes: 0 (none), 32, 64
    /// or 128.
    pub swizzle_bytes: u32,
}

/// One argument of a kernel launch, in the kernel's parameter order.
pub enum KernelArg<'a> {
    Tensor(&'a RawTensor),
    TensorMut(&'a mut RawTensor),
    F32(f32),
    I32(i32),
    U32(u32),
    F16(f16),
    BF16(bf16),
}

impl<'a> KernelArg<'a> {
    /// A read-only tensor argument (`&Tensor<T, ..>`).
    pub fn tensor<T: Element>(t: &'a DeviceTensor<T>) -> Self {
        KernelArg::Tensor(&t.raw)
    }
    /// A writable tensor argument (`&mut Tensor<T, ..>`).
    pub fn tensor_mut<T: Element>(t: &'a mut DeviceTensor<T>) -> Self {
        KernelArg::TensorMut(&mut t.raw)
    }

    fn describe(&self) -> String {
        match self {
            KernelArg::Tensor(t) => format!("a read-only {} tensor", t.dtype),
            KernelArg::TensorMut(t) => format!("a writable {} tensor", t.dtype),
            KernelArg::F32(_) => "an f32 scalar".into(),
            KernelArg::I32(_) => "an i32 scalar".into(),
            KernelArg::U32(_) => "a u32 scalar".into(),
            KernelArg::F16(_) => "an f16 scalar".into(),
            KernelArg::BF16(_) => "a bf16 scalar".into(),
        }
    }

    fn scalar(&self) -> Option<Value> {
        Some(match *self {
            KernelArg::F32(v) => Value::F32(v),
            KernelArg::I32(v) => Value::I32(v),
            KernelArg::U32(v) => Value::U32(v),
            KernelArg::F16(v) => Value::F16(v),
            KernelArg::BF16(v) => Value::BF16(v),
            KernelArg::Tensor(_) | KernelArg::TensorMut(_) => return None,
        })
    }

    fn raw(&self) -> Option<&RawTensor> {
        match self {
            KernelArg::Tensor(t) => Some(t),
            KernelArg::TensorMut(t) => Some(t),
            _ => None,
        }
    }
}

/// Parsed kernels, by the address of their `&'static KernelMeta`.
fn parsed_kernel(meta: &'static KernelMeta) -> Result<Arc<Kernel>> {
    static KERNELS: OnceLock<Mutex<HashMap<usize, Arc<Kernel>>>> = OnceLock::new();
    let key = meta as *const KernelMeta as usize;
    let cache = KERNELS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(k) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(k.clone());
    }
    let invalid = |message: String| Error::InvalidMeta { kernel: meta.name.to_string(), message };
    let kernel: Kernel = serde_json::from_str(meta.ir).map_err(|e| invalid(format!("the IR does not parse: {e}")))?;
    check_signature(&kernel).map_err(invalid)?;
    check_variants(&kernel, meta.targets).map_err(invalid)?;
    let kernel = Arc::new(kernel);
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(key, kernel.clone());
    Ok(kernel)
}

/// Checks what the launch path relies on (so that `tile_ir::abi` cannot index
/// out of range): handles in range, tensor parameters global with every
/// dynamic extent listed in `dims`, dims `i32`, scalars of a launchable type.
fn check_signature(k: &Kernel) -> std::result::Result<(), String> {
    let var_ok = |v: tile_ir::VarId| (v.0 as usize) < k.vars.len();
    for &d in &k.dims {
        if !var_ok(d) {
            return Err(format!("dimension {d} is out of range"));
        }
    }
    for p in &k.params {
        match p.kind {
            ParamKind::Tensor(b) => {
                let Some(buf) = k.buffers.get(b.0 as usize) else {
                    return Err(format!("parameter `{}` names buffer {b}, out of range", p.name));
                };
                if !matches!(buf.dtype, DType::F16 | DType::BF16 | DType::F32 | DType::I32 | DType::U32) {
                    return Err(format!("parameter `{}` has element type {}, not launchable", p.name, buf.dtype));
                }
                for e in &buf.shape {
                    if let tile_ir::Extent::Dyn(v) = e {
                        if !k.dims.contains(v) {
                            return Err(format!("parameter `{}` uses {v}, which is not in `dims`", p.name));
                        }
                    }
                }
            }
            ParamKind::Scalar(v) => {
                if !var_ok(v) {
                    return Err(format!("parameter `{}` names variable {v}, out of range", p.name));
                }
            }
        }
    }
    Ok(())
}

/// Checks every variant's tensor maps: each names a tensor parameter, with
/// a box of that tensor's rank and a swizzle the driver knows.
fn check_variants(k: &Kernel, targets: &[KernelTarget]) -> std::result::Result<(), String> {
    for t in targets {
        for m in t.tensor_maps {
            let Some(ParamKind::Tensor(b)) = k.params.get(m.tensor).map(|p| &p.kind) else {
                return Err(format!(
                    "a {} tensor map names parameter {}, which is not a tensor parameter",
                    t.arch, m.tensor
                ));
            };
            let rank = k.buffers.get(b.0 as usize).map_or(0, |b| b.shape.len());
            if m.box_shape.len() != rank {
                return Err(format!(
                    "the {} tensor map of `{}` has a {}-D box for a {rank}-D tensor",
                    t.arch,
                    k.params[m.tensor].name,
                    m.box_shape.len()
                ));
            }
            if TmaSwizzle::from_bytes(m.swizzle_bytes).is_none() {
                return Err(format!(
                    "the {} tensor map of `{}` has a {}-byte swizzle (expected 0, 32, 64 or 128)",
                    t.arch, k.params[m.tensor].name, m.swizzle_bytes
                ));
            }
        }
    }
    Ok(())
}

/// Launches the kernel described by `meta` on `stream` with `args` (one per
/// kernel parameter, in order). Returns once the launch is issued (GPU) or
/// the kernel has run (interpreter).
pub fn launch(stream: &Stream, meta: &'static KernelMeta, args: &mut [KernelArg<'_>]) -> Result<()> {
    let kernel = parsed_kernel(meta)?;
    let k = &*kernel;
    check_args(k, stream, args)?;

    let shapes: Vec<Option<&[usize]>> = args.iter().map(|a| a.raw().map(|t| t.shape.as_slice())).collect();
    let dims = tile_ir::abi::bind_dims(k, &shapes).map_err(|e| Error::Shape {
        kernel: k.name.clone(),
        param: e.param,
        dim: e.dim,
        message: e.message,
    })?;
    let grid =
        tile_ir::abi::eval_grid(k, &dims).map_err(|message| Error::Launch { kernel: k.name.clone(), message })?;
    if grid.contains(&0) {
        return Ok(());
    }

    match &stream.device.kind {
        DeviceKind::Interpreter => launch_interpreter(k, args, &dims, grid),
        DeviceKind::Cuda(dev) => launch_cuda(dev, meta, k, args, &dims, grid),
    }
}

fn check_args(k: &Kernel, stream: &Stream, args: &[KernelArg<'_>]) -> Result<()> {
    if args.len() != k.params.len() {
        let names: Vec<&str> = k.params.iter().map(|p| p.name.as_str()).collect();
        return Err(Error::Argument {
            kernel: k.name.clone(),
            param: String::new(),
            message: format!(
                "the kernel takes {} arguments ({}), got {}",
                k.params.len(),
                names.join(", "),
                args.len()
            ),
        });
    }
    for (p, arg) in k.params.iter().zip(args) {
        let wrong = |expected: String| Error::Argument {
            kernel: k.name.clone(),
            param: p.name.clone(),
            message: format!("expects {expected}, got {}", arg.describe()),
        };
        match p.kind {
            ParamKind::Tensor(b) => {
                let buf = k.buffer(b);
                let expected =
                    || format!("a {} {} tensor", if buf.mutable { "writable" } else { "read-only" }, buf.dtype);
                let Some(t) = arg.raw() else { return Err(wrong(expected())) };
                if t.dtype != buf.dtype || (buf.mutable && !matches!(arg, KernelArg::TensorMut(_))) {
                    return Err(wrong(expected()));
                }
                t.check_device(stream, &|| format!("tensor `{}` of kernel `{}`", p.name, k.name))?;
            }
            ParamKind::Scalar(v) => {
                let dtype = k.var(v).dtype;
                match arg.scalar() {
                    Some(value) if value.dtype() == dtype => {}
                    _ => return Err(wrong(format!("{} {dtype} scalar", article(dtype)))),
                }
            }
        }
    }
    Ok(())
}

/// "a" or "an" before a type name as spoken ("an f32", "a u32").
fn article(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 | DType::F32 | DType::I32 | DType::I64 => "an",
        DType::BF16 | DType::U32 | DType::Bool => "a",
    }
}

fn launch_interpreter(k: &Kernel, args: &mut [KernelArg<'_>], dims: &[i64], grid: [u32; 3]) -> Result<()> {
    let mut interp_args: Vec<InterpArg<'_>> = Vec::with_capacity(args.len());
    for arg in args.iter_mut() {
        interp_args.push(match arg {
            KernelArg::Tensor(t) => match &t.storage {
                Storage::Host(bytes) => InterpArg::Tensor { data: TensorData::Ro(bytes), shape: t.shape.clone() },
                Storage::Cuda { .. } => return Err(Error::DeviceMismatch(format!("a tensor of kernel `{}`", k.name))),
            },
            KernelArg::TensorMut(t) => {
                let shape = t.shape.clone();
                match &mut t.storage {
                    Storage::Host(bytes) => InterpArg::Tensor { data: TensorData::Rw(bytes), shape },
                    Storage::Cuda { .. } => {
                        return Err(Error::DeviceMismatch(format!("a tensor of kernel `{}`", k.name)))
                    }
                }
            }
            other => InterpArg::Scalar(other.scalar().expect("tensor arguments are handled above")),
        });
    }
    // The interpreter is ordinary code; a bug in it must not take the caller down.
    let outcome = catch_unwind(AssertUnwindSafe(|| tile_ir::interp::run(k, &mut interp_args, dims, grid)));
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Interpreter(format!("kernel `{}`: {e}", k.name))),
        Err(_) => Err(Error::Interpreter(format!(
            "kernel `{}`: the interpreter panicked (a bug in tile; please report it with the kernel)",
            k.name
        ))),
    }
}

/// A kernel loaded into one device's context.
pub(crate) struct LoadedKernel {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
    function: sys::CUfunction,
    shared_bytes: u32,
    /// Launches issued with this variant ([`crate::Device::launch_counts`]).
    pub(crate) launches: std::sync::atomic::AtomicU64,
}

// SAFETY: module and function handles are plain driver handles, usable from
// any thread once the owning context is current (every use binds it first).
unsafe impl Send for LoadedKernel {}
unsafe impl Sync for LoadedKernel {}

impl Drop for LoadedKernel {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the module was loaded by `load_kernel` and is unloaded once, here.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

/// The arch to run on a device of compute capability `cc`: sm_90a PTX on
/// 9.x, else sm_80 on 8.0 and later (sm_80 also on 9.x without sm_90a).
fn pick_arch(meta: &'static KernelMeta, cc: (u32, u32)) -> Result<&'static str> {
    let has = |arch: &str| meta.targets.iter().any(|t| t.arch == arch);
    let chosen = if cc.0 == 9 && has("sm_90a") {
        Some("sm_90a")
    } else if cc.0 >= 8 && has("sm_80") {
        Some("sm_80")
    } else {
        None
    };
    chosen.ok_or_else(|| Error::NoTarget {
        kernel: meta.name.to_string(),
        device_arch: format!("sm_{}{}", cc.0, cc.1),
        available: meta.targets.iter().map(|t| t.arch.to_string()).collect(),
    })
}

/// The preferred (first) variant of the target for compute capability `cc`.
#[cfg(test)]
pub(crate) fn pick_target(meta: &'static KernelMeta, cc: (u32, u32)) -> Result<&'static KernelTarget> {
    let arch = pick_arch(meta, cc)?;
    Ok(meta.targets.iter().find(|t| t.arch == arch).expect("pick_arch found it"))
}

/// A tensor argument as variant choice and map encoding see it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct TensorPlace<'a> {
    /// Device address of element 0 (0 for an empty tensor).
    pub address: u64,
    pub shape: &'a [usize],
    pub dtype: DType,
}

/// The index in `meta.targets` of the variant to launch on a device of
/// compute capability `cc`: among the variants of the chosen arch, in
/// order, the first whose mapped tensors are all TMA-addressable.
/// `tensors[i]` is parameter `i`'s tensor (`None` for scalars).
pub(crate) fn pick_variant(
    meta: &'static KernelMeta,
    k: &Kernel,
    cc: (u32, u32),
    tensors: &[Option<TensorPlace<'_>>],
) -> Result<usize> {
    let arch = pick_arch(meta, cc)?;
    let mut refused = Vec::new();
    for (i, t) in meta.targets.iter().enumerate().filter(|(_, t)| t.arch == arch) {
        let blocker = t.tensor_maps.iter().find(|m| match tensors.get(m.tensor).copied().flatten() {
            Some(p) => !tile_ir::abi::tma_addressable(p.address, p.shape, p.dtype.size_bytes() as usize),
            None => true,
        });
        match blocker {
            None => return Ok(i),
            Some(m) => refused.push(
                k.params.get(m.tensor).map_or_else(|| format!("parameter {}", m.tensor), |p| format!("`{}`", p.name)),
            ),
        }
    }
    Err(Error::Launch {
        kernel: k.name.clone(),
        message: format!(
            "every {arch} variant needs TMA-addressable tensors, and {} is not (a 16-byte aligned address and rows \
             of a multiple of 16 bytes); rebuild the kernel with a tile version whose last variant has no tensor maps",
            refused.join(", ")
        ),
    })
}

/// The cluster shape to launch with: `None` when the kernel has none or the
/// device (compute capability `cc`) has no clusters, which never changes
/// the kernel's meaning. On 9.0 and later the grid must be a multiple of
/// the cluster on every axis (else the message says what to change).
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
pub(crate) fn launch_cluster(
    k: &Kernel,
    grid: [u32; 3],
    cc: (u32, u32),
) -> std::result::Result<Option<[u32; 3]>, String> {
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

fn loaded_kernel(dev: &CudaDevice, meta: &'static KernelMeta, variant: usize, k: &Kernel) -> Result<Arc<LoadedKernel>> {
    let key = (meta as *const KernelMeta as usize, variant);
    let mut cache = dev.kernels.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(loaded) = cache.get(&key) {
        return Ok(loaded.clone());
    }
    let loaded = Arc::new(load_kernel(dev, meta, &meta.targets[variant], k)?);
    cache.insert(key, loaded.clone());
    Ok(loaded)
}

/// Most encoded tensor maps a device keeps; past it the cache starts over.
const TENSOR_MAP_CACHE_LIMIT: usize = 4096;

/// The driver's description of tensor map `m` over `tensor`: dense
/// row-major strides from its shape, the box and swizzle of the variant,
/// L2 promotion 256 bytes.
pub(crate) fn map_spec(m: &TensorMapMeta, tensor: TensorPlace<'_>) -> TensorMapSpec {
    let shape: Vec<u64> = tensor.shape.iter().map(|&d| d as u64).collect();
    let swizzle = TmaSwizzle::from_bytes(m.swizzle_bytes).unwrap_or(TmaSwizzle::None);
    let mut spec = TensorMapSpec::row_major(tensor.dtype, tensor.address, &shape, m.box_shape, swizzle);
    spec.l2_promotion = L2Promotion::B256;
    spec
}

/// Encodes `spec` on `dev`, or returns the map encoded before for the same
/// spec: an encoding depends on nothing else, so a cached map is exactly
/// what the driver would give again (GEMM benchmarks launch thousands of
/// times on the same tensors; `cuTensorMapEncodeTiled` is a host call).
fn encoded_map(dev: &Arc<CudaDevice>, spec: TensorMapSpec) -> Result<TensorMap> {
    if let Some(map) = dev.tensor_maps.lock().unwrap_or_else(|e| e.into_inner()).get(&spec) {
        return Ok(*map);
    }
    let map = TensorMap::encode(&crate::Device { kind: DeviceKind::Cuda(dev.clone()) }, &spec)?;
    let mut cache = dev.tensor_maps.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= TENSOR_MAP_CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(spec, map);
    Ok(map)
}

const JIT_LOG_BYTES: usize = 16 * 1024;
/// Dynamic shared memory a block may use without opting in.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

fn load_kernel(dev: &CudaDevice, meta: &'static KernelMeta, target: &KernelTarget, k: &Kernel) -> Result<LoadedKernel> {
    let launch_err = |message: String| Error::Launch { kernel: k.name.clone(), message };
    if target.shared_bytes > dev.max_shared_optin.max(DEFAULT_SHARED_LIMIT) {
        return Err(launch_err(format!(
            "it needs {} bytes of shared memory per block ({}), but {} allows at most {}",
            target.shared_bytes, target.arch, dev.name, dev.max_shared_optin
        )));
    }
    let ptx = CString::new(target.ptx).map_err(|_| Error::InvalidMeta {
        kernel: meta.name.to_string(),
        message: "the PTX contains a NUL byte".into(),
    })?;
    let entry = CString::new(k.name.as_str()).map_err(|_| Error::InvalidMeta {
        kernel: meta.name.to_string(),
        message: "the name contains a NUL byte".into(),
    })?;
    dev.ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;

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
        return Err(Error::Jit { kernel: k.name.clone(), arch: target.arch.to_string(), log });
    }
    let mut loaded = LoadedKernel {
        ctx: dev.ctx.clone(),
        module,
        function: std::ptr::null_mut(),
        shared_bytes: target.shared_bytes,
        launches: std::sync::atomic::AtomicU64::new(0),
    };
    // SAFETY: `module` was just loaded; `entry` is NUL-terminated.
    loaded.function = unsafe { result::module::get_function(module, entry) }
        .map_err(|e| launch_err(format!("the PTX for {} has no entry `{}`: {}", target.arch, k.name, describe(e))))?;
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
    Ok(loaded)
}

/// One launch parameter's bytes; `cuLaunchKernel` reads each through a pointer.
#[derive(Copy, Clone)]
#[repr(C, align(8))]
struct ParamSlot([u8; 8]);

impl ParamSlot {
    fn new(bytes: &[u8]) -> ParamSlot {
        let mut slot = [0u8; 8];
        slot[..bytes.len()].copy_from_slice(bytes);
        ParamSlot(slot)
    }
}

/// The launch parameters in ABI order: tensor pointers (params order), each
/// dynamic dimension as i32 (`dims` order), scalars (params order; 16-bit
/// floats as their bits).
///
/// Pointers are taken through cudarc's `DevicePtr`/`DevicePtrMut` on
/// `stream` (writable tensors as writes), so cudarc's multi-stream tracking
/// sees the kernel's accesses: the returned guards record them when dropped,
/// which must happen after the launch is issued. Host tensors (the
/// interpreter, in tests) give null pointers. Also returns each tensor
/// parameter's address (`None` for scalars), in parameter order.
fn abi_params<'a>(
    k: &Kernel,
    args: &'a mut [KernelArg<'_>],
    dims: &[i64],
    stream: Option<&'a CudaStream>,
) -> (Vec<ParamSlot>, Vec<SyncOnDrop<'a>>, Vec<Option<u64>>) {
    let scalars: Vec<ParamSlot> = args
        .iter()
        .filter_map(|arg| match *arg {
            KernelArg::F32(v) => Some(ParamSlot::new(&v.to_le_bytes())),
            KernelArg::I32(v) => Some(ParamSlot::new(&v.to_le_bytes())),
            KernelArg::U32(v) => Some(ParamSlot::new(&v.to_le_bytes())),
            KernelArg::F16(v) => Some(ParamSlot::new(&v.to_bits().to_le_bytes())),
            KernelArg::BF16(v) => Some(ParamSlot::new(&v.to_bits().to_le_bytes())),
            KernelArg::Tensor(_) | KernelArg::TensorMut(_) => None,
        })
        .collect();
    let mut slots = Vec::with_capacity(k.params.len() + k.dims.len());
    let mut guards = Vec::new();
    let mut addresses = Vec::with_capacity(args.len());
    for arg in args.iter_mut() {
        let (ptr, guard) = match (arg, stream) {
            (KernelArg::Tensor(t), Some(stream)) => match &t.storage {
                Storage::Cuda { slice: Some(slice), .. } => {
                    let (ptr, guard) = slice.device_ptr(stream);
                    (ptr, Some(guard))
                }
                _ => (0, None),
            },
            (KernelArg::TensorMut(t), Some(stream)) => match &mut t.storage {
                Storage::Cuda { slice: Some(slice), .. } => {
                    let (ptr, guard) = slice.device_ptr_mut(stream);
                    (ptr, Some(guard))
                }
                _ => (0, None),
            },
            (KernelArg::Tensor(_) | KernelArg::TensorMut(_), None) => (0, None),
            _ => {
                addresses.push(None);
                continue;
            }
        };
        addresses.push(Some(ptr));
        slots.push(ParamSlot::new(&ptr.to_le_bytes()));
        guards.extend(guard);
    }
    for &d in dims {
        // `bind_dims` guarantees every dimension fits in i32.
        slots.push(ParamSlot::new(&(d as i32).to_le_bytes()));
    }
    slots.extend(scalars);
    debug_assert_eq!(slots.len(), k.params.len() + k.dims.len());
    (slots, guards, addresses)
}

/// The parameter array `cuLaunchKernel` reads: a pointer to each slot, then
/// each tensor map's 128 bytes ([`TensorMap::param_ptr`]), in the variant's
/// order. Valid while `slots` and `maps` live and do not move.
fn param_pointers(slots: &mut [ParamSlot], maps: &[TensorMap]) -> Vec<*mut c_void> {
    let mut pointers: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut ParamSlot).cast()).collect();
    pointers.extend(maps.iter().map(TensorMap::param_ptr));
    pointers
}

fn launch_cuda(
    dev: &Arc<CudaDevice>,
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
    let (mut slots, _access_guards, addresses) = abi_params(k, args, dims, Some(&dev.stream));
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
    if target.threads == 0 || target.threads > 1024 {
        return Err(launch_err(format!(
            "its {} code has {} threads per block; a block has 1 to 1024 threads",
            target.arch, target.threads
        )));
    }
    let loaded = loaded_kernel(dev, meta, variant, k)?;
    let grid = if target.persistent && cluster.is_none() {
        let blocks = grid.iter().map(|&g| g as u64).product::<u64>();
        [blocks.min(dev.multiprocessors as u64) as u32, 1, 1]
    } else {
        grid
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
    let mut pointers = param_pointers(&mut slots, &maps);
    dev.ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
    let launched = match cluster {
        // SAFETY: `function` is live (held by `loaded`); `pointers` has one
        // entry per PTX parameter, each pointing at a slot or a tensor map
        // that outlives the call (the driver copies parameters at launch);
        // the tensors are borrowed by `args` for the duration, and writable
        // ones exclusively.
        None => unsafe {
            result::launch_kernel(
                loaded.function,
                (grid[0], grid[1], grid[2]),
                (target.threads, 1, 1),
                loaded.shared_bytes,
                dev.stream.cu_stream(),
                &mut pointers,
            )
        }
        .map_err(|e| launch_err(format!("cuLaunchKernel failed: {}", describe(e)))),
        Some(cluster) => guarded("cuLaunchKernelEx", || {
            // SAFETY: an all-zero launch attribute is a valid value of this
            // plain C struct; the cluster fields are set next.
            let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attribute.value.clusterDim =
                sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: cluster[0], y: cluster[1], z: cluster[2] };
            let config = sys::CUlaunchConfig {
                gridDimX: grid[0],
                gridDimY: grid[1],
                gridDimZ: grid[2],
                blockDimX: target.threads,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: loaded.shared_bytes,
                hStream: dev.stream.cu_stream(),
                attrs: &mut attribute,
                numAttrs: 1,
            };
            // SAFETY: as for cuLaunchKernel above; `config` and `attribute`
            // outlive the call.
            unsafe { sys::cuLaunchKernelEx(&config, loaded.function, pointers.as_mut_ptr(), std::ptr::null_mut()) }
                .result()
                .map_err(|e| launch_err(format!("cuLaunchKernelEx (cluster {cluster:?}) failed: {}", describe(e))))
        }),
    };
    if launched.is_ok() {
        loaded.launches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    launched
}

/// Launches per entry of `meta.targets` on `dev` so far.
pub(crate) fn launch_counts(dev: &CudaDevice, meta: &'static KernelMeta) -> Vec<u64> {
    let key = meta as *const KernelMeta as usize;
    let cache = dev.kernels.lock().unwrap_or_else(|e| e.into_inner());
    (0..meta.targets.len())
        .map(|v| cache.get(&(key, v)).map_or(0, |l| l.launches.load(std::sync::atomic::Ordering::Relaxed)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_ir::Extent;

    fn meta_with(archs: &[&'static str]) -> &'static KernelMeta {
        let targets: Vec<KernelTarget> = archs
            .iter()
            .map(|&arch| KernelTarget {
                arch,
                ptx: "",
                shared_bytes: 0,
                threads: 32,
                tensor_maps: &[],
                persistent: false,
            })
            .collect();
        Box::leak(Box::new(KernelMeta { name: "k", ir: "", targets: Box::leak(targets.into_boxed_slice()) }))
    }

    #[test]
    fn target_choice_follows_the_compute_capability() {
        let both = meta_with(&["sm_80", "sm_90a"]);
        assert_eq!(pick_target(both, (9, 0)).unwrap().arch, "sm_90a");
        assert_eq!(pick_target(both, (8, 9)).unwrap().arch, "sm_80");
        assert_eq!(pick_target(both, (8, 0)).unwrap().arch, "sm_80");
        // sm_90a code runs only on 9.x; later GPUs run the portable PTX.
        assert_eq!(pick_target(both, (10, 0)).unwrap().arch, "sm_80");
        assert_eq!(pick_target(meta_with(&["sm_80"]), (9, 0)).unwrap().arch, "sm_80");
        match pick_target(meta_with(&["sm_90a"]), (8, 6)) {
            Err(Error::NoTarget { kernel, device_arch, available }) => {
                assert_eq!((kernel.as_str(), device_arch.as_str()), ("k", "sm_86"));
                assert_eq!(available, vec!["sm_90a".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        let err = pick_target(both, (7, 5)).unwrap_err();
        assert!(err.to_string().contains("TILE_ARCHS"), "{err}");
    }

    /// The ABI order: tensor pointers, then dims in `dims` order, then scalars
    /// in parameter order, 16-bit floats as their bits.
    #[test]
    fn launch_parameters_follow_the_abi_order() {
        let mut k = Kernel::new("abi", 32);
        let m = k.add_dim("M");
        let n = k.add_dim("N");
        k.add_tensor_param("x", DType::F32, vec![Extent::Dyn(n), Extent::Dyn(m)], false);
        k.add_scalar_param("h", DType::F16);
        k.add_tensor_param("y", DType::F32, vec![Extent::Dyn(m)], true);
        k.add_scalar_param("b", DType::BF16);
        k.add_scalar_param("u", DType::U32);
        k.add_scalar_param("f", DType::F32);
        let x = RawTensor { shape: vec![5, 3], dtype: DType::F32, storage: Storage::Host(vec![0; 60]) };
        let mut y = RawTensor { shape: vec![3], dtype: DType::F32, storage: Storage::Host(vec![0; 12]) };
        let h = f16::from_f32(-2.5);
        let b = bf16::from_f32(0.75);
        let mut args = [
            KernelArg::Tensor(&x),
            KernelArg::F16(h),
            KernelArg::TensorMut(&mut y),
            KernelArg::BF16(b),
            KernelArg::U32(0xDEAD_BEEF),
            KernelArg::F32(1.25),
        ];
        let (slots, guards, addresses) = abi_params(&k, &mut args, &[3, 5], None);
        assert_eq!(addresses, vec![Some(0), None, Some(0), None, None, None]);
        assert!(guards.is_empty());
        let words: Vec<u64> = slots.iter().map(|s| u64::from_le_bytes(s.0)).collect();
        assert_eq!(
            words,
            vec![0, 0, 3, 5, h.to_bits() as u64, b.to_bits() as u64, 0xDEAD_BEEF, 1.25f32.to_bits() as u64]
        );
    }

    const MAPS_A_C: &[TensorMapMeta] = &[
        TensorMapMeta { tensor: 0, box_shape: &[64, 64], swizzle_bytes: 128 },
        TensorMapMeta { tensor: 2, box_shape: &[64, 32], swizzle_bytes: 64 },
    ];

    fn target(arch: &'static str, threads: u32, tensor_maps: &'static [TensorMapMeta]) -> KernelTarget {
        KernelTarget { arch, ptx: "", shared_bytes: 0, threads, tensor_maps, persistent: false }
    }

    fn leak_meta(targets: Vec<KernelTarget>) -> &'static KernelMeta {
        Box::leak(Box::new(KernelMeta { name: "mm", ir: "", targets: Box::leak(targets.into_boxed_slice()) }))
    }

    /// `mm(a: &f16[M, K], s: f32, c: &mut f16[M, N])`.
    fn gemm_like() -> Kernel {
        let mut k = Kernel::new("mm", 256);
        let m = k.add_dim("M");
        let kd = k.add_dim("K");
        let n = k.add_dim("N");
        k.add_tensor_param("a", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(kd)], false);
        k.add_scalar_param("s", DType::F32);
        k.add_tensor_param("c", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], true);
        k
    }

    fn place(address: u64, shape: &[usize]) -> Option<TensorPlace<'_>> {
        Some(TensorPlace { address, shape, dtype: DType::F16 })
    }

    #[test]
    fn the_first_variant_whose_tensors_are_tma_addressable_runs() {
        let k = gemm_like();
        // Variants of sm_90a, preferred first; sm_80 in between to check
        // that only the chosen arch's entries count.
        let meta =
            leak_meta(vec![target("sm_90a", 384, MAPS_A_C), target("sm_80", 256, &[]), target("sm_90a", 256, &[])]);
        check_variants(&k, meta.targets).unwrap();
        let (a, c) = ([1000, 2048], [1000, 512]);
        let pick = |pa: u64, sa: &[usize], pc: u64, sc: &[usize], cc| {
            pick_variant(meta, &k, cc, &[place(pa, sa), None, place(pc, sc)]).unwrap()
        };
        assert_eq!(pick(0x10000, &a, 0x20000, &c, (9, 0)), 0);
        // An address off by 8 bytes, on either mapped tensor.
        assert_eq!(pick(0x10008, &a, 0x20000, &c, (9, 0)), 2);
        assert_eq!(pick(0x10000, &a, 0x20008, &c, (9, 0)), 2);
        // Rows of 1001 f16 elements (2002 bytes) are not a multiple of 16 bytes.
        assert_eq!(pick(0x10000, &[1000, 1001], 0x20000, &c, (9, 0)), 2);
        assert_eq!(pick(0x10000, &a, 0x20000, &[3, 1004], (9, 0)), 2);
        // Rows of 1000 f16 (2000 bytes) are; so are rows of 8 (16 bytes).
        assert_eq!(pick(0x10000, &[7, 1000], 0x20000, &[1, 8], (9, 0)), 0);
        // An empty tensor (address 0, a zero extent) is not addressable.
        assert_eq!(pick(0, &[0, 2048], 0x20000, &c, (9, 0)), 2);
        // Other GPUs run sm_80, whatever the tensors.
        assert_eq!(pick(0x10000, &a, 0x20000, &c, (8, 0)), 1);
        assert_eq!(pick(0x10008, &a, 0x20000, &c, (10, 0)), 1);
        // A kernel with a single variant per arch (no warp specialization).
        let single = leak_meta(vec![target("sm_80", 256, &[]), target("sm_90a", 256, &[])]);
        assert_eq!(pick_variant(single, &k, (9, 0), &[place(3, &a), None, place(5, &c)]).unwrap(), 1);
    }

    #[test]
    fn without_a_general_variant_the_error_names_the_tensor() {
        let k = gemm_like();
        let meta = leak_meta(vec![target("sm_90a", 384, MAPS_A_C)]);
        let err =
            pick_variant(meta, &k, (9, 0), &[place(0x10000, &[64, 64]), None, place(0x20004, &[64, 64])]).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::Launch { .. }), "{err:?}");
        assert!(text.contains("`mm`") && text.contains("`c`") && text.contains("TMA-addressable"), "{text}");
        // A map over a scalar parameter never runs (and the meta check rejects it).
        let bad =
            leak_meta(vec![target("sm_90a", 384, &[TensorMapMeta { tensor: 1, box_shape: &[8], swizzle_bytes: 0 }])]);
        assert!(pick_variant(bad, &k, (9, 0), &[place(0x10000, &[64, 64]), None, place(0x20000, &[64, 64])]).is_err());
    }

    #[test]
    fn variant_metadata_is_checked() {
        let k = gemm_like();
        let err = |maps: &'static [TensorMapMeta]| check_variants(&k, &[target("sm_90a", 384, maps)]).unwrap_err();
        let e = err(&[TensorMapMeta { tensor: 1, box_shape: &[8], swizzle_bytes: 0 }]);
        assert!(e.contains("parameter 1") && e.contains("not a tensor"), "{e}");
        let e = err(&[TensorMapMeta { tensor: 7, box_shape: &[8], swizzle_bytes: 0 }]);
        assert!(e.contains("parameter 7"), "{e}");
        let e = err(&[TensorMapMeta { tensor: 0, box_shape: &[1, 64, 64], swizzle_bytes: 0 }]);
        assert!(e.contains("`a`") && e.contains("3-D box for a 2-D tensor"), "{e}");
        let e = err(&[TensorMapMeta { tensor: 2, box_shape: &[64, 64], swizzle_bytes: 96 }]);
        assert!(e.contains("`c`") && e.contains("96-byte swizzle"), "{e}");
    }

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

    /// Tensor maps come after every other parameter, in the variant's order,
    /// each as a pointer to its 128 bytes.
    #[test]
    fn tensor_maps_are_appended_after_the_other_parameters() {
        let k = gemm_like();
        let a = RawTensor { shape: vec![2, 8], dtype: DType::F16, storage: Storage::Host(vec![0; 32]) };
        let mut c = RawTensor { shape: vec![2, 8], dtype: DType::F16, storage: Storage::Host(vec![0; 32]) };
        let mut args = [KernelArg::Tensor(&a), KernelArg::F32(0.5), KernelArg::TensorMut(&mut c)];
        let (mut slots, _guards, _) = abi_params(&k, &mut args, &[2, 8, 8], None);
        assert_eq!(slots.len(), 6);
        let maps = [TensorMap::from_bytes([1; 128]), TensorMap::from_bytes([2; 128])];
        let pointers = param_pointers(&mut slots, &maps);
        assert_eq!(pointers.len(), 8);
        for (p, s) in pointers.iter().zip(slots.iter()) {
            assert_eq!(*p as *const ParamSlot, s as *const ParamSlot);
        }
        assert_eq!(pointers[6], maps[0].param_ptr());
        assert_eq!(pointers[7], maps[1].param_ptr());
        // SAFETY: the pointers point at the live slots and maps above.
        let words: Vec<u64> = pointers[..6].iter().map(|&p| unsafe { *(p as *const u64) }).collect();
        assert_eq!(words, vec![0, 0, 2, 8, 8, 0.5f32.to_bits() as u64]);
        assert_eq!(unsafe { *(pointers[7] as *const [u8; 128]) }, [2; 128]);
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

    #[test]
    fn signature_check_rejects_out_of_range_handles() {
        let mut k = Kernel::new("bad", 32);
        k.add_tensor_param("t", DType::F32, vec![Extent::Dyn(tile_ir::VarId(9))], false);
        let err = check_signature(&k).unwrap_err();
        assert!(err.contains("`t`") && err.contains("%9"), "{err}");
        k.params[0].kind = ParamKind::Tensor(tile_ir::BufferId(4));
        assert!(check_signature(&k).unwrap_err().contains("out of range"));
    }
}

//! Kernel metadata, arguments and the launch path shared by every generated
//! `launch` wrapper.
//!
//! `#[tile_kernel]` embeds a [`KernelMeta`] (the Tile IR as JSON and the PTX
//! of each target) in a `static`, and its wrapper calls [`launch`] with one
//! [`KernelArg`] per parameter. `launch`:
//! 1. parses the IR once per `KernelMeta` (cached by the static's address) and
//!    checks that it describes a launchable signature;
//! 2. checks the arguments' number, kind, element type, mutability and device;
//! 3. binds the dynamic dimensions from the tensor shapes and evaluates the
//!    grid (`tile_ir::abi`, the same code for both paths); an empty grid does
//!    nothing;
//! 4. runs the kernel on the interpreter, or on the GPU: picks the PTX target
//!    for the device, loads it once per device (keeping the driver's JIT log on
//!    failure), raises the dynamic shared-memory limit once when needed, and
//!    launches with the parameters in the launch ABI order.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::safe::{CudaContext, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use cudarc::driver::{result, sys};
use half::{bf16, f16};
use tile_ir::interp::{Arg as InterpArg, TensorData};
use tile_ir::{DType, Kernel, ParamKind, Value};

use crate::device::{describe, driver_err, CudaDevice, DeviceKind, Stream};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::tensor::{DeviceTensor, RawTensor, Storage};

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

/// One kernel compiled for one target.
#[derive(Debug)]
pub struct KernelTarget {
    /// `sm_80` or `sm_90a`.
    pub arch: &'static str,
    pub ptx: &'static str,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
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
    let grid = tile_ir::abi::eval_grid(k, &dims).map_err(|message| Error::Launch { kernel: k.name.clone(), message })?;
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
                let expected = || format!("a {} {} tensor", if buf.mutable { "writable" } else { "read-only" }, buf.dtype);
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

/// The target to run on a device of compute capability `cc`: sm_90a PTX on
/// 9.x, else sm_80 on 8.0 and later.
pub(crate) fn pick_target(meta: &'static KernelMeta, cc: (u32, u32)) -> Result<&'static KernelTarget> {
    let find = |arch: &str| meta.targets.iter().find(|t| t.arch == arch);
    let chosen = if cc.0 == 9 { find("sm_90a").or_else(|| find("sm_80")) } else if cc.0 >= 8 { find("sm_80") } else { None };
    chosen.ok_or_else(|| Error::NoTarget {
        kernel: meta.name.to_string(),
        device_arch: format!("sm_{}{}", cc.0, cc.1),
        available: meta.targets.iter().map(|t| t.arch.to_string()).collect(),
    })
}

fn loaded_kernel(dev: &CudaDevice, meta: &'static KernelMeta, k: &Kernel) -> Result<Arc<LoadedKernel>> {
    let key = meta as *const KernelMeta as usize;
    let mut cache = dev.kernels.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(loaded) = cache.get(&key) {
        return Ok(loaded.clone());
    }
    let target = pick_target(meta, dev.compute_capability)?;
    let loaded = Arc::new(load_kernel(dev, meta, target, k)?);
    cache.insert(key, loaded.clone());
    Ok(loaded)
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
    let ptx = CString::new(target.ptx)
        .map_err(|_| Error::InvalidMeta { kernel: meta.name.to_string(), message: "the PTX contains a NUL byte".into() })?;
    let entry = CString::new(k.name.as_str())
        .map_err(|_| Error::InvalidMeta { kernel: meta.name.to_string(), message: "the name contains a NUL byte".into() })?;
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
    let mut loaded = LoadedKernel { ctx: dev.ctx.clone(), module, function: std::ptr::null_mut(), shared_bytes: target.shared_bytes };
    // SAFETY: `module` was just loaded; `entry` is NUL-terminated.
    loaded.function = unsafe { result::module::get_function(module, entry) }.map_err(|e| {
        launch_err(format!("the PTX for {} has no entry `{}`: {}", target.arch, k.name, describe(e)))
    })?;
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
/// interpreter, in tests) give null pointers.
fn abi_params<'a>(
    k: &Kernel,
    args: &'a mut [KernelArg<'_>],
    dims: &[i64],
    stream: Option<&'a CudaStream>,
) -> (Vec<ParamSlot>, Vec<SyncOnDrop<'a>>) {
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
            _ => continue,
        };
        slots.push(ParamSlot::new(&ptr.to_le_bytes()));
        guards.extend(guard);
    }
    for &d in dims {
        // `bind_dims` guarantees every dimension fits in i32.
        slots.push(ParamSlot::new(&(d as i32).to_le_bytes()));
    }
    slots.extend(scalars);
    debug_assert_eq!(slots.len(), k.params.len() + k.dims.len());
    (slots, guards)
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
    if k.threads == 0 || k.threads > 1024 {
        return Err(launch_err(format!("{} threads per block; a block has 1 to 1024 threads", k.threads)));
    }
    let loaded = loaded_kernel(dev, meta, k)?;
    let (mut slots, _access_guards) = abi_params(k, args, dims, Some(&dev.stream));
    let mut pointers: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut ParamSlot).cast()).collect();
    dev.ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
    // SAFETY: `function` is live (held by `loaded`); `pointers` has one entry
    // per PTX parameter, each pointing at a slot that outlives the call (the
    // driver copies parameters at launch); the tensors are borrowed by `args`
    // for the duration, and writable ones exclusively.
    unsafe {
        result::launch_kernel(
            loaded.function,
            (grid[0], grid[1], grid[2]),
            (k.threads, 1, 1),
            loaded.shared_bytes,
            dev.stream.cu_stream(),
            &mut pointers,
        )
    }
    .map_err(|e| launch_err(format!("cuLaunchKernel failed: {}", describe(e))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_ir::Extent;

    fn meta_with(archs: &[&'static str]) -> &'static KernelMeta {
        let targets: Vec<KernelTarget> = archs.iter().map(|&arch| KernelTarget { arch, ptx: "", shared_bytes: 0 }).collect();
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
        let (slots, guards) = abi_params(&k, &mut args, &[3, 5], None);
        assert!(guards.is_empty());
        let words: Vec<u64> = slots.iter().map(|s| u64::from_le_bytes(s.0)).collect();
        assert_eq!(
            words,
            vec![0, 0, 3, 5, h.to_bits() as u64, b.to_bits() as u64, 0xDEAD_BEEF, 1.25f32.to_bits() as u64]
        );
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

//! cuBLAS as a peer: row-major half-precision GEMM on the same device,
//! stream and tensors as tile kernels, for checking and benchmarking them.
//!
//! Expects: a [`Stream`] of a CUDA device and [`DeviceTensor`]s on it.
//! Guarantees: `C[M, N] = op(A) · op(B)` in row-major order with products
//! accumulated in f32 (`cublasGemmEx`, `CUBLAS_COMPUTE_32F`), issued on the
//! stream in order with kernels; every failure is an [`Error`], never a panic.
//!
//! cuBLAS is loaded here, with `dlopen`, rather than through cudarc's binding:
//! cudarc (built for CUDA 12) searches only `libcublas.so`, `.so.12`, `.so.11`
//! ... and panics when none loads, while current drivers ship
//! `libcublas.so.13`. The search order is `$TILE_CUBLAS` (a file name or
//! path), then `libcublas.so.13`, `.so.12`, `.so.11`, `libcublas.so`, each by
//! the loader's usual rules (`LD_LIBRARY_PATH`, the ld.so cache). The five
//! entry points used (`cublasCreate_v2`, `cublasDestroy_v2`,
//! `cublasSetStream_v2`, `cublasGemmEx`, and the version query) have the same
//! ABI in cuBLAS 11, 12 and 13.
//!
//! Row-major through a column-major library: a row-major `X[r, c]` is the
//! column-major `Xᵀ` with leading dimension `c`, so `C = A·B` is computed as
//! `Cᵀ = Bᵀ·Aᵀ`, i.e. cuBLAS is called with the operands swapped and M, N
//! exchanged; no data moves.

use cudarc::driver::safe::{DevicePtr, DevicePtrMut};
use std::ffi::{c_int, c_void, CString};
use std::sync::{Arc, OnceLock};

use crate::device::{CudaDevice, DeviceKind, Stream};
use crate::driver::driver_err;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::tensor::{DeviceTensor, Storage};

/// The environment variable naming the cuBLAS library to load (a file name
/// searched by the loader, or a path), before the default names.
pub const CUBLAS_ENV: &str = "TILE_CUBLAS";

/// The library names tried after `$TILE_CUBLAS`, newest first.
const LIBRARY_NAMES: &[&str] = &["libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"];

/// An element type cuBLAS multiplies here (f16 and bf16, f32 accumulation).
pub trait CublasElement: Element + sealed::Sealed {
    /// The `cudaDataType` of the element.
    #[doc(hidden)]
    const CUDA_DATA_TYPE: c_int;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

impl CublasElement for half::f16 {
    const CUDA_DATA_TYPE: c_int = 2; // CUDA_R_16F
}

impl CublasElement for half::bf16 {
    const CUDA_DATA_TYPE: c_int = 14; // CUDA_R_16BF
}

// Values of the cuBLAS C API (cublas_api.h, library_types.h), stable across 11–13.
const CUBLAS_OP_N: c_int = 0;
const CUBLAS_OP_T: c_int = 1;
const CUBLAS_COMPUTE_32F: c_int = 68;
const CUBLAS_GEMM_DEFAULT: c_int = -1;

type Handle = *mut c_void;
type CreateFn = unsafe extern "C" fn(*mut Handle) -> c_int;
type DestroyFn = unsafe extern "C" fn(Handle) -> c_int;
type SetStreamFn = unsafe extern "C" fn(Handle, *mut c_void) -> c_int;
type GetVersionFn = unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
#[allow(clippy::type_complexity)]
type GemmExFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_int,
    c_int,
) -> c_int;

/// The loaded library and its entry points. Loaded once per process and never
/// unloaded (handles may outlive any one `Gemm`).
struct Library {
    name: String,
    create: CreateFn,
    destroy: DestroyFn,
    set_stream: SetStreamFn,
    get_version: GetVersionFn,
    gemm_ex: GemmExFn,
}

#[cfg(target_os = "linux")]
mod dl {
    use std::ffi::{c_char, c_int, c_void, CStr};

    const RTLD_NOW: c_int = 2;

    extern "C" {
        fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        fn dlerror() -> *mut c_char;
    }

    fn last_error() -> String {
        // SAFETY: dlerror returns null or a NUL-terminated string owned by the loader.
        let msg = unsafe { dlerror() };
        if msg.is_null() {
            "unknown loader error".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated (above); copied before the next dl call.
            unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
        }
    }

    /// Opens a shared library; the handle is never closed.
    pub fn open(name: &CStr) -> Result<*mut c_void, String> {
        // SAFETY: a valid C string; dlopen runs the library's initializers, which is
        // what loading cuBLAS means.
        let handle = unsafe { dlopen(name.as_ptr(), RTLD_NOW) };
        if handle.is_null() {
            Err(last_error())
        } else {
            Ok(handle)
        }
    }

    pub fn symbol(handle: *mut c_void, name: &CStr) -> Result<*mut c_void, String> {
        // SAFETY: `handle` came from dlopen and is never closed.
        let sym = unsafe { dlsym(handle, name.as_ptr()) };
        if sym.is_null() {
            Err(last_error())
        } else {
            Ok(sym)
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod dl {
    use std::ffi::{c_void, CStr};

    pub fn open(_name: &CStr) -> Result<*mut c_void, String> {
        Err("loading cuBLAS is implemented for Linux only".to_string())
    }

    pub fn symbol(_handle: *mut c_void, _name: &CStr) -> Result<*mut c_void, String> {
        Err("loading cuBLAS is implemented for Linux only".to_string())
    }
}

fn load_library() -> std::result::Result<Library, String> {
    let mut names: Vec<String> = Vec::new();
    if let Some(from_env) = std::env::var_os(CUBLAS_ENV).filter(|v| !v.is_empty()) {
        names.push(from_env.to_string_lossy().into_owned());
    }
    names.extend(LIBRARY_NAMES.iter().map(|s| s.to_string()));
    load_first(&names)
}

/// The first of `names` that loads and has every entry point.
fn load_first(names: &[String]) -> std::result::Result<Library, String> {
    let mut failures = Vec::new();
    for name in names {
        let Ok(cname) = CString::new(name.as_str()) else {
            failures.push(format!("{name}: contains a NUL byte"));
            continue;
        };
        match dl::open(&cname).and_then(|handle| bind(handle, name)) {
            Ok(library) => return Ok(library),
            Err(err) => failures.push(err),
        }
    }
    Err(format!(
        "cuBLAS could not be loaded (tried {}): {}. Put the directory of libcublas.so.* on \
         LD_LIBRARY_PATH, or set {CUBLAS_ENV} to the library's path",
        names.join(", "),
        failures.join("; ")
    ))
}

fn bind(handle: *mut c_void, name: &str) -> std::result::Result<Library, String> {
    let sym = |symbol: &str| -> std::result::Result<*mut c_void, String> {
        let c = CString::new(symbol).map_err(|_| format!("bad symbol name {symbol}"))?;
        dl::symbol(handle, &c).map_err(|err| format!("{name} has no `{symbol}` ({err})"))
    };
    // SAFETY: each symbol is the cuBLAS C function of that name, whose signature
    // (cublas_api.h) is the function-pointer type it is transmuted to.
    unsafe {
        Ok(Library {
            name: name.to_string(),
            create: std::mem::transmute::<*mut c_void, CreateFn>(sym("cublasCreate_v2")?),
            destroy: std::mem::transmute::<*mut c_void, DestroyFn>(sym("cublasDestroy_v2")?),
            set_stream: std::mem::transmute::<*mut c_void, SetStreamFn>(sym("cublasSetStream_v2")?),
            get_version: std::mem::transmute::<*mut c_void, GetVersionFn>(sym("cublasGetVersion_v2")?),
            gemm_ex: std::mem::transmute::<*mut c_void, GemmExFn>(sym("cublasGemmEx")?),
        })
    }
}

fn library() -> Result<&'static Library> {
    static LIBRARY: OnceLock<std::result::Result<Library, String>> = OnceLock::new();
    LIBRARY.get_or_init(load_library).as_ref().map_err(|msg| Error::NoDriver(msg.clone()))
}

/// The name of a cuBLAS status code.
fn status_name(status: c_int) -> &'static str {
    match status {
        0 => "CUBLAS_STATUS_SUCCESS",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED",
        3 => "CUBLAS_STATUS_ALLOC_FAILED",
        7 => "CUBLAS_STATUS_INVALID_VALUE",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH",
        11 => "CUBLAS_STATUS_MAPPING_ERROR",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED",
        16 => "CUBLAS_STATUS_LICENSE_ERROR",
        _ => "unknown cuBLAS status",
    }
}

fn check(call: &str, status: c_int) -> Result<()> {
    if status == 0 {
        Ok(())
    } else {
        Err(Error::Driver { call: call.to_string(), message: format!("{} ({status})", status_name(status)) })
    }
}

fn shape_error(message: String) -> Error {
    Error::Shape { kernel: String::new(), param: String::new(), dim: None, message }
}

/// A cuBLAS handle bound to one stream: row-major GEMM on [`DeviceTensor`]s.
///
/// ```ignore
/// let blas = tile::cublas::Gemm::new(&stream)?;
/// blas.gemm_f16(m, n, k, &a, &b, &mut c, false, false)?; // c[m, n] = a[m, k] · b[k, n]
/// ```
///
/// The handle may move to another thread but is not shared between threads
/// (cuBLAS handles are not safe for concurrent use).
pub struct Gemm {
    library: &'static Library,
    handle: Handle,
    device: Arc<CudaDevice>,
    stream: Stream,
}

// SAFETY: a cuBLAS handle may be used from any thread, one at a time; `Gemm`
// is not `Sync`, so `&self` calls cannot race.
unsafe impl Send for Gemm {}

impl std::fmt::Debug for Gemm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cublas::Gemm({} on cuda:{})", self.library.name, self.device.ordinal)
    }
}

impl Gemm {
    /// Loads cuBLAS (once per process) and creates a handle that issues its
    /// work on `stream`. [`Error::NoDriver`] when `stream` is the interpreter's
    /// or cuBLAS cannot be loaded.
    pub fn new(stream: &Stream) -> Result<Gemm> {
        let device = match &stream.device.kind {
            DeviceKind::Cuda(d) => d.clone(),
            DeviceKind::Interpreter => {
                return Err(Error::NoDriver(
                    "cuBLAS runs on a CUDA GPU; this stream belongs to the CPU interpreter".to_string(),
                ))
            }
        };
        let library = library()?;
        device.ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: `create` writes a new handle for the current context through a valid pointer.
        check("cublasCreate_v2", unsafe { (library.create)(&mut handle) })?;
        let gemm = Gemm { library, handle, device: device.clone(), stream: stream.clone() };
        // SAFETY: a live handle and the device's live stream (which outlives the device value we hold).
        check("cublasSetStream_v2", unsafe {
            (library.set_stream)(
                handle,
                stream.cuda_stream().map_or(device.stream.cu_stream(), |s| s.cu_stream()) as *mut c_void,
            )
        })?;
        Ok(gemm)
    }

    /// The cuBLAS version, e.g. 130100 for 13.1.0.
    pub fn version(&self) -> Result<i32> {
        let mut version: c_int = 0;
        // SAFETY: a live handle; writes one int.
        check("cublasGetVersion_v2", unsafe { (self.library.get_version)(self.handle, &mut version) })?;
        Ok(version)
    }

    /// The library file that was loaded (e.g. `libcublas.so.13`).
    pub fn library_name(&self) -> &str {
        &self.library.name
    }

    /// `c = op(a) · op(b)` for f16 tensors; see [`Gemm::gemm`].
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_f16(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &DeviceTensor<half::f16>,
        b: &DeviceTensor<half::f16>,
        c: &mut DeviceTensor<half::f16>,
        trans_a: bool,
        trans_b: bool,
    ) -> Result<()> {
        self.gemm(m, n, k, a, b, c, trans_a, trans_b)
    }

    /// `c = op(a) · op(b)` for bf16 tensors; see [`Gemm::gemm`].
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_bf16(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &DeviceTensor<half::bf16>,
        b: &DeviceTensor<half::bf16>,
        c: &mut DeviceTensor<half::bf16>,
        trans_a: bool,
        trans_b: bool,
    ) -> Result<()> {
        self.gemm(m, n, k, a, b, c, trans_a, trans_b)
    }

    /// Row-major `c[m, n] = op(a) · op(b)`, products accumulated in f32 and
    /// rounded to `T` once. `a` is `[m, k]`, or `[k, m]` with `trans_a`
    /// (then `op(a) = aᵀ`); `b` is `[k, n]`, or `[n, k]` with `trans_b`;
    /// `c` is `[m, n]`. Issued on the handle's stream (asynchronous, in order
    /// with kernels on it). Shapes that disagree are [`Error::Shape`].
    #[allow(clippy::too_many_arguments)]
    pub fn gemm<T: CublasElement>(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &DeviceTensor<T>,
        b: &DeviceTensor<T>,
        c: &mut DeviceTensor<T>,
        trans_a: bool,
        trans_b: bool,
    ) -> Result<()> {
        let a_shape = if trans_a { [k, m] } else { [m, k] };
        let b_shape = if trans_b { [n, k] } else { [k, n] };
        for (what, tensor_shape, want) in
            [("a", a.shape(), &a_shape[..]), ("b", b.shape(), &b_shape[..]), ("c", c.shape(), &[m, n][..])]
        {
            if tensor_shape != want {
                return Err(shape_error(format!(
                    "cublas gemm (m = {m}, n = {n}, k = {k}, trans_a = {trans_a}, trans_b = {trans_b}): \
                     `{what}` must have shape {want:?} but has {tensor_shape:?}"
                )));
            }
        }
        for (name, value) in [("m", m), ("n", n), ("k", k)] {
            if value > i32::MAX as usize {
                return Err(shape_error(format!("cublas gemm: {name} = {value} does not fit cuBLAS's 32-bit sizes")));
            }
        }
        a.raw.check_device(&self.stream, &|| "the tensor `a` of cublas gemm".to_string())?;
        b.raw.check_device(&self.stream, &|| "the tensor `b` of cublas gemm".to_string())?;
        c.raw.check_device(&self.stream, &|| "the tensor `c` of cublas gemm".to_string())?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        if k == 0 {
            // An empty sum: C = 0. (cuBLAS would too, but a and b have no allocation.)
            if let Storage::Cuda { slice: Some(slice), .. } = &mut c.raw.storage {
                self.stream
                    .cuda_stream()
                    .unwrap_or(&self.device.stream)
                    .memset_zeros(slice)
                    .map_err(driver_err("cuMemsetD8Async"))?;
            }
            return Ok(());
        }
        // The pointers are taken on the handle's stream and their guards held
        // until the call is issued, so that the gemm waits for the last writes
        // of a and b and later uses wait for it (tensors' stream events).
        let on: &cudarc::driver::safe::CudaStream = self.stream.cuda_stream().unwrap_or(&self.device.stream);
        let (Some(sa), Some(sb)) = (a.cuda_slice(), b.cuda_slice()) else {
            return Err(Error::DeviceMismatch("a tensor of cublas gemm".to_string()));
        };
        let Some(sc) = c.cuda_slice_mut() else {
            return Err(Error::DeviceMismatch("the tensor `c` of cublas gemm".to_string()));
        };
        let (a_ptr, _read_a) = sa.device_ptr(on);
        let (b_ptr, _read_b) = sb.device_ptr(on);
        let (c_ptr, _write_c) = sc.device_ptr_mut(on);
        let (m, n, k) = (m as c_int, n as c_int, k as c_int);
        // Cᵀ[n, m] = op(B)ᵀ · op(A)ᵀ in column-major terms (module doc): cuBLAS's
        // first operand is B, whose column-major view is op(B)ᵀ unless trans_b.
        let (op_b, ld_b) = if trans_b { (CUBLAS_OP_T, k) } else { (CUBLAS_OP_N, n) };
        let (op_a, ld_a) = if trans_a { (CUBLAS_OP_T, m) } else { (CUBLAS_OP_N, k) };
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        self.device.ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        // SAFETY: a live handle; a, b, c are live device allocations on this
        // handle's device holding exactly the [rows, cols] checked above, so every
        // access with these leading dimensions is in bounds; alpha and beta are
        // host f32 values as CUBLAS_COMPUTE_32F expects in the default pointer mode.
        let status = unsafe {
            (self.library.gemm_ex)(
                self.handle,
                op_b,
                op_a,
                n,
                m,
                k,
                (&alpha as *const f32).cast(),
                b_ptr as *const c_void,
                T::CUDA_DATA_TYPE,
                ld_b,
                a_ptr as *const c_void,
                T::CUDA_DATA_TYPE,
                ld_a,
                (&beta as *const f32).cast(),
                c_ptr as *mut c_void,
                T::CUDA_DATA_TYPE,
                n,
                CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT,
            )
        };
        check("cublasGemmEx", status)
    }
}

impl Drop for Gemm {
    fn drop(&mut self) {
        // Destroying synchronizes with the handle's work; a failure here cannot be
        // reported and leaks at most the handle's workspace.
        if self.device.ctx.bind_to_thread().is_ok() {
            // SAFETY: the handle is live and destroyed once.
            let _ = unsafe { (self.library.destroy)(self.handle) };
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_reported_with_every_name_tried() {
        let names = vec!["/nonexistent/libcublas.so.13".to_string(), "libtile-no-such-cublas.so".to_string()];
        let err = load_first(&names).err().expect("no such library");
        assert!(err.contains("tried /nonexistent/libcublas.so.13, libtile-no-such-cublas.so"), "{err}");
        assert!(err.contains("/nonexistent/libcublas.so.13:"), "the loader's reason is kept: {err}");
        assert!(err.contains(CUBLAS_ENV), "{err}");
    }

    #[test]
    fn a_library_without_cublas_symbols_is_rejected() {
        // The C math library loads everywhere glibc does, and has no cuBLAS.
        let err = load_first(&["libm.so.6".to_string()]).err().expect("libm is not cuBLAS");
        assert!(err.contains("libm.so.6 has no `cublasCreate_v2`"), "{err}");
        // ... while its own symbols resolve through the same path.
        let handle = dl::open(c"libm.so.6").unwrap();
        assert!(dl::symbol(handle, c"cos").is_ok());
    }
}

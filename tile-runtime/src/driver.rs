//! The CUDA driver, used safely: probing `libcuda`, initializing it, and
//! turning its failures (error codes and binding panics) into [`Error`]s.
//!
//! Expects nothing: this is the bottom of the runtime besides `error`.
//! Guarantees: no cudarc call is made before [`driver_library`] has found
//! `libcuda` (cudarc panics when it is absent), so a machine without an
//! NVIDIA driver gets [`Error::NoDriver`], never a panic; every message
//! saying that there is no driver comes from here. With the feature
//! `dynamic-linking` (for programs that also use candle's CUDA backend)
//! libcuda is linked at build time instead: such a program does not start
//! without it, so the probe has nothing to find.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use cudarc::driver::{result, DriverError};

use crate::error::{Error, Result};

/// The driver error as "CUDA_ERROR_X: description".
pub(crate) fn describe(err: DriverError) -> String {
    let name = err.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", err.0));
    match err.error_string() {
        Ok(text) => format!("{name}: {}", text.to_string_lossy()),
        Err(_) => name,
    }
}

/// Maps a driver error of `call` to [`Error::Driver`].
pub(crate) fn driver_err(call: &str) -> impl FnOnce(DriverError) -> Error + '_ {
    move |err| Error::Driver { call: call.to_string(), message: describe(err) }
}

fn no_driver_message(detail: &str) -> String {
    format!(
        "no NVIDIA driver was found: {detail}. Kernels can run on the CPU instead: use \
         Device::interpreter(), or Device::auto() with TILE_INTERPRET=1 (auto also falls back to \
         the interpreter when there is no GPU)"
    )
}

/// Whether `libcuda` can be loaded. Probed once; cudarc is touched only after this succeeds.
pub(crate) fn driver_library() -> Result<()> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries to open the library (dlopen) and
    // drops the handle; it runs no driver code besides the library's initializers.
    #[cfg(not(feature = "dynamic-linking"))]
    let present =
        *PRESENT.get_or_init(|| catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false));
    // Linked at build time (feature `dynamic-linking`): the program would not
    // have started without it.
    #[cfg(feature = "dynamic-linking")]
    let present = *PRESENT.get_or_init(|| true);
    if present {
        Ok(())
    } else {
        Err(Error::NoDriver(no_driver_message(
            "the CUDA driver library (libcuda.so / libcuda.so.1) could not be loaded",
        )))
    }
}

/// Initializes the driver (`cuInit`) and checks that CUDA device `ordinal`
/// exists. Call after [`driver_library`], inside [`guarded`].
pub(crate) fn init(ordinal: usize) -> Result<()> {
    if let Err(err) = result::init() {
        return Err(Error::NoDriver(no_driver_message(&format!(
            "the CUDA driver library loaded but cuInit failed with {} (no GPU, or a driver/kernel-module mismatch)",
            describe(err)
        ))));
    }
    let count = result::device::get_count().map_err(driver_err("cuDeviceGetCount"))?;
    if count <= 0 {
        return Err(Error::NoDriver(no_driver_message("the NVIDIA driver reports no CUDA device")));
    }
    if ordinal >= count as usize {
        return Err(Error::Driver {
            call: "cuDeviceGet".into(),
            message: format!("there is no CUDA device {ordinal}: this machine has {count} (ordinals 0..{count})"),
        });
    }
    Ok(())
}

/// Runs a cudarc call that may panic (a symbol missing from an old driver),
/// turning a panic into an error.
pub(crate) fn guarded<R>(call: &str, f: impl FnOnce() -> Result<R>) -> Result<R> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".to_string());
        Err(Error::Driver {
            call: call.to_string(),
            message: format!("the driver binding failed ({what}); the installed NVIDIA driver may be too old"),
        })
    })
}

/// The driver's version (`cuDriverGetVersion`, e.g. 12080), or 0 when it
/// cannot be asked. Asked once.
pub(crate) fn driver_version() -> i32 {
    static VERSION: OnceLock<i32> = OnceLock::new();
    *VERSION.get_or_init(|| {
        if driver_library().is_err() {
            return 0;
        }
        catch_unwind(|| {
            let mut v: std::ffi::c_int = 0;
            // SAFETY: `cuDriverGetVersion` writes one int through the pointer,
            // which points at a live local; it needs no context.
            let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
            if status == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
                v
            } else {
                0
            }
        })
        .unwrap_or(0)
    })
}

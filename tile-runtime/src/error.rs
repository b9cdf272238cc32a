//! The runtime's error type.
//!
//! Every variant says what went wrong and what to do about it: the runtime
//! never panics on a missing driver, a bad argument or a driver failure; it
//! returns one of these.

/// An error from the tile runtime.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable NVIDIA driver (`libcuda`) on this machine, or the driver
    /// found no GPU. The message says which, and how to run on the CPU.
    #[error("{0}")]
    NoDriver(String),

    /// A CUDA driver call failed.
    #[error("CUDA driver call `{call}` failed: {message}")]
    Driver {
        /// The driver function (`cuMemAlloc_v2`, ..).
        call: String,
        /// The driver's error name and description.
        message: String,
    },

    /// The driver could not JIT-compile a kernel's PTX. `log` is the driver's
    /// status, its error log (and info log, if any) and a hint.
    #[error("the CUDA driver could not load the {arch} PTX of kernel `{kernel}`: {log}")]
    Jit {
        /// The kernel's name.
        kernel: String,
        /// The PTX target (`sm_80`, `sm_90a`).
        arch: String,
        /// The driver's status and logs, with a hint.
        log: String,
    },

    /// The kernel carries no PTX that this GPU can run.
    #[error(
        "kernel `{kernel}` has no PTX for this GPU ({device_arch}); it was built for {available:?}. \
         Rebuild with TILE_ARCHS naming a target this GPU runs (sm_80 runs on compute capability \
         8.0 and later, sm_90a only on 9.x)"
    )]
    NoTarget {
        /// The kernel's name.
        kernel: String,
        /// The GPU's architecture (`sm_86`, ..).
        device_arch: String,
        /// The targets the kernel was built for.
        available: Vec<String>,
    },

    /// A tensor's shape disagrees with what was asked for: a kernel's
    /// signature (`kernel` and `param` name it), or a tensor constructor
    /// (`kernel` and `param` are then empty).
    #[error("{}", shape_message(kernel, message))]
    Shape {
        /// The kernel's name (empty for a tensor constructor).
        kernel: String,
        /// The parameter's name (empty for a tensor constructor).
        param: String,
        /// The dimension at fault, when one is.
        dim: Option<usize>,
        /// What disagrees, in words.
        message: String,
    },

    /// An argument of the wrong kind, element type or mutability for a kernel
    /// parameter, or the wrong number of arguments. The generated `launch`
    /// wrappers make this a type error; it shows up when calling
    /// `__private::launch` by hand with arguments that do not match the kernel.
    #[error("kernel `{kernel}`, parameter `{param}`: {message}")]
    Argument {
        /// The kernel's name.
        kernel: String,
        /// The parameter's name.
        param: String,
        /// What is wrong with the argument.
        message: String,
    },

    /// The launch itself was refused: bad grid, too much shared memory, or the
    /// driver rejected it.
    #[error("cannot launch kernel `{kernel}`: {message}")]
    Launch {
        /// The kernel's name.
        kernel: String,
        /// Why, and what to change.
        message: String,
    },

    /// The embedded kernel metadata is unreadable (the `tile` crates that
    /// compiled the kernel and the runtime disagree).
    #[error(
        "kernel `{kernel}`: its embedded metadata is invalid: {message}. \
         Rebuild with matching versions of the tile crates"
    )]
    InvalidMeta {
        /// The kernel's name.
        kernel: String,
        /// What could not be read.
        message: String,
    },

    /// The CPU interpreter failed (or the kernel did something the
    /// interpreter rejects).
    #[error("{0}")]
    Interpreter(String),

    /// A tensor does not fit in the memory of its device (a GPU's, or the
    /// host's on the interpreter). `tensor` names it (element type and
    /// shape), `message` gives the limit and what to do.
    #[error("cannot allocate {tensor} ({bytes} bytes) on {device}: {message}")]
    OutOfMemory {
        /// The tensor (element type and shape).
        tensor: String,
        /// The device.
        device: String,
        /// The bytes asked for.
        bytes: u64,
        /// The limit and what to do.
        message: String,
    },

    /// A tensor lives on another device than the stream it is used with.
    #[error(
        "{0} lives on a different device than the stream; create the tensors and the stream \
         from the same Device"
    )]
    DeviceMismatch(String),

    /// A misuse of a runtime API that is not one of the above (e.g. `bench`
    /// with zero iterations).
    #[error("{0}")]
    Usage(String),
}

fn shape_message(kernel: &str, message: &str) -> String {
    if kernel.is_empty() {
        message.to_string()
    } else {
        format!("kernel `{kernel}`: {message}")
    }
}

/// `Result` with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

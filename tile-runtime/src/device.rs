//! Devices, streams and events.
//!
//! A [`Device`] is a CUDA GPU (through cudarc, with `libcuda` loaded at run
//! time) or the CPU interpreter. Expects `driver.rs` to have found the driver
//! library before any cudarc call (cudarc panics when it is absent): no
//! driver gives [`Error::NoDriver`], never a panic. Guarantees: each CUDA
//! device is opened once per process (its primary context) and shared by
//! every `Device` value for that ordinal, together with its caches
//! (`cache.rs`); so a kernel's PTX is loaded once per device.
//! [`Device::launch_counts`] reads those caches and lives beside the launch
//! that counts (`launch/cuda.rs`), so that this file knows nothing of kernels.
//!
//! A [`Stream`] is an ordered queue of work: [`Device::stream`] gives the
//! device's default stream, [`Device::new_stream`] a new stream of its own,
//! whose work runs concurrently with other streams'. Tensors carry events
//! (cudarc's multi-stream tracking), so a tensor written on one stream and
//! read on another is read after the write. On the interpreter everything is
//! synchronous.
//!
//! # Threads
//!
//! [`Device`], [`Stream`], [`Event`] and [`crate::DeviceTensor`] are `Send`
//! and `Sync` (asserted at compile time in `tests/runtime.rs`), and so a
//! generated `launch` may be called from any number of threads at once:
//! - a `Device` is an `Arc` of the opened device, whose state is the CUDA
//!   primary context (the driver API is thread-safe; every call binds the
//!   context to the calling thread first), immutable properties, and caches
//!   built for concurrency (`cache.rs`: each variant loaded once, whatever
//!   the number of threads launching it first; no lock held across a driver
//!   call that could wait for another lock; poisoned locks recovered);
//! - a `Stream` is a device and a CUDA stream handle; issuing work on one
//!   stream from several threads is allowed (the driver serializes it), but
//!   then their order on the stream is whatever order the calls were made in;
//! - a `DeviceTensor` is its memory and events; Rust's borrows make writes
//!   exclusive (`launch` takes `&mut` for outputs), so several threads may
//!   read one tensor while none writes it;
//! - launch counters are atomics.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cudarc::driver::{safe::CudaContext, safe::CudaEvent, safe::CudaStream, sys};

use crate::cache::{KernelCache, OnceMap, TensorMapCache};
use crate::driver::{self, driver_err, guarded};
use crate::error::{Error, Result};

/// The environment variable that makes [`Device::auto`] pick the interpreter.
pub const INTERPRET_ENV: &str = "TILE_INTERPRET";

/// The environment variable (`1`) that turns on the interpreter's check
/// mode ([`tile_ir::interp::Options::check`]) for every launch on the
/// interpreter: reads of never-written shared, fragment and local elements
/// are errors naming the kernel, the buffer, the indices, the block and the
/// statement's source line.
pub const INTERPRET_CHECK_ENV: &str = "TILE_INTERPRET_CHECK";

/// A device that runs kernels: a CUDA GPU or the CPU interpreter.
#[derive(Clone)]
pub struct Device {
    pub(crate) kind: DeviceKind,
}

#[derive(Clone)]
pub(crate) enum DeviceKind {
    Interpreter,
    Cuda(Arc<CudaDevice>),
}

/// One opened CUDA device: its primary context, default stream, properties
/// and caches. Lives for the rest of the process.
pub(crate) struct CudaDevice {
    pub(crate) ordinal: usize,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) name: String,
    pub(crate) compute_capability: (u32, u32),
    /// Streaming multiprocessors (the blocks of a persistent launch).
    pub(crate) multiprocessors: u32,
    /// What a launch and an allocation may ask for (checked before the
    /// driver call, so that the message is ours).
    pub(crate) limits: DeviceLimits,
    /// Loaded kernels (each variant once) and their launch counts.
    pub(crate) kernels: KernelCache,
    /// Encoded TMA tensor maps.
    pub(crate) tensor_maps: TensorMapCache,
}

/// A GPU's launch and memory limits, queried when it is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeviceLimits {
    /// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    pub(crate) max_threads_per_block: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{X,Y,Z}`.
    pub(crate) max_grid: [u32; 3],
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, in bytes.
    pub(crate) max_shared_optin: u32,
    /// The device's memory in bytes (`cuDeviceTotalMem`).
    pub(crate) total_memory: u64,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            DeviceKind::Interpreter => f.write_str("Device(CPU interpreter)"),
            DeviceKind::Cuda(d) => write!(
                f,
                "Device(cuda:{} {}, sm_{}{})",
                d.ordinal, d.name, d.compute_capability.0, d.compute_capability.1
            ),
        }
    }
}

/// Opened CUDA devices, by ordinal: each opened once, even when several
/// threads ask for it first (`cache::OnceMap`).
fn cuda_devices() -> &'static OnceMap<usize, CudaDevice> {
    static DEVICES: OnceLock<OnceMap<usize, CudaDevice>> = OnceLock::new();
    DEVICES.get_or_init(OnceMap::default)
}

fn open_cuda(ordinal: usize) -> Result<CudaDevice> {
    driver::init(ordinal)?;
    let ctx = CudaContext::new(ordinal).map_err(driver_err("cuDevicePrimaryCtxRetain"))?;
    let name = ctx.name().map_err(driver_err("cuDeviceGetName"))?;
    let (major, minor) = ctx.compute_capability().map_err(driver_err("cuDeviceGetAttribute"))?;
    let attribute = |a: sys::CUdevice_attribute| -> Result<u32> {
        Ok(ctx.attribute(a).map_err(driver_err("cuDeviceGetAttribute"))?.max(0) as u32)
    };
    use sys::CUdevice_attribute as A;
    let limits = DeviceLimits {
        max_threads_per_block: attribute(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_grid: [
            attribute(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            attribute(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            attribute(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ],
        max_shared_optin: attribute(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        total_memory: ctx.total_mem().map_err(driver_err("cuDeviceTotalMem"))? as u64,
    };
    let multiprocessors = attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let stream = ctx.default_stream();
    Ok(CudaDevice {
        ordinal,
        ctx,
        stream,
        name,
        compute_capability: (major.max(0) as u32, minor.max(0) as u32),
        multiprocessors: multiprocessors.max(1),
        limits,
        kernels: KernelCache::default(),
        tensor_maps: TensorMapCache::default(),
    })
}

impl Device {
    /// CUDA device `ordinal`. [`Error::NoDriver`] when there is no NVIDIA
    /// driver or no GPU; never panics.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        driver::driver_library()?;
        let dev = cuda_devices().get_or_try_init(&ordinal, || guarded("cuInit", || open_cuda(ordinal)))?;
        Ok(Device { kind: DeviceKind::Cuda(dev) })
    }

    /// The CPU interpreter: runs kernels from their Tile IR, one block at a time.
    pub fn interpreter() -> Device {
        Device { kind: DeviceKind::Interpreter }
    }

    /// The interpreter if `TILE_INTERPRET` is set (to anything but `0` or
    /// empty); else CUDA device 0 if there is a driver and a GPU; else the
    /// interpreter. Other CUDA failures (a GPU that is there but cannot be
    /// opened) are returned, not hidden.
    pub fn auto() -> Result<Device> {
        if interpret_requested() {
            return Ok(Device::interpreter());
        }
        match Device::cuda(0) {
            Ok(dev) => Ok(dev),
            Err(Error::NoDriver(_)) => Ok(Device::interpreter()),
            Err(err) => Err(err),
        }
    }

    /// Whether this is the CPU interpreter.
    pub fn is_interpreter(&self) -> bool {
        matches!(self.kind, DeviceKind::Interpreter)
    }

    /// The GPU's name, or `"CPU interpreter"`.
    pub fn name(&self) -> &str {
        match &self.kind {
            DeviceKind::Interpreter => "CPU interpreter",
            DeviceKind::Cuda(d) => &d.name,
        }
    }

    /// `(major, minor)` of a GPU; `None` for the interpreter.
    pub fn compute_capability(&self) -> Option<(u32, u32)> {
        match &self.kind {
            DeviceKind::Interpreter => None,
            DeviceKind::Cuda(d) => Some(d.compute_capability),
        }
    }

    /// The GPU's memory in bytes (`cuDeviceTotalMem`); `None` for the
    /// interpreter. A tensor larger than this is [`Error::OutOfMemory`]
    /// before the driver is asked.
    pub fn total_memory(&self) -> Option<u64> {
        match &self.kind {
            DeviceKind::Interpreter => None,
            DeviceKind::Cuda(d) => Some(d.limits.total_memory),
        }
    }

    /// The most dynamic shared memory a block may use on this GPU, in bytes
    /// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, at least the
    /// 48 KiB every block may use); `None` for the interpreter. A variant
    /// needing more is refused at launch with an [`Error::Launch`] naming it.
    pub fn max_shared_memory_per_block(&self) -> Option<u32> {
        match &self.kind {
            DeviceKind::Interpreter => None,
            DeviceKind::Cuda(d) => Some(d.limits.max_shared_optin.max(48 * 1024)),
        }
    }

    /// The GPU's streaming multiprocessors (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`,
    /// e.g. what a split-KV scheduler balances over); `None` for the interpreter.
    pub fn multiprocessor_count(&self) -> Option<u32> {
        match &self.kind {
            DeviceKind::Interpreter => None,
            DeviceKind::Cuda(d) => Some(d.multiprocessors),
        }
    }

    /// The CUDA ordinal; `None` for the interpreter.
    pub fn ordinal(&self) -> Option<usize> {
        match &self.kind {
            DeviceKind::Interpreter => None,
            DeviceKind::Cuda(d) => Some(d.ordinal),
        }
    }

    /// A stream on this device: the device's default stream (the same one
    /// each call). Work on it runs in the order it was issued.
    pub fn stream(&self) -> Result<Stream> {
        let cuda = match &self.kind {
            DeviceKind::Interpreter => None,
            DeviceKind::Cuda(d) => Some(d.stream.clone()),
        };
        Ok(Stream { device: self.clone(), cuda, tile_counter: TileCounter::default() })
    }

    /// A new stream of its own on this device (`cuStreamCreate`,
    /// non-blocking): its work may run concurrently with other streams'.
    /// A tensor used on several streams is ordered by its events (a read
    /// waits for the last write issued before it). On the interpreter it is
    /// the same as [`Device::stream`].
    pub fn new_stream(&self) -> Result<Stream> {
        let cuda = match &self.kind {
            DeviceKind::Interpreter => None,
            DeviceKind::Cuda(d) => {
                Some(guarded("cuStreamCreate", || d.ctx.new_stream().map_err(driver_err("cuStreamCreate")))?)
            }
        };
        Ok(Stream { device: self.clone(), cuda, tile_counter: TileCounter::default() })
    }

    /// The cudarc context of a GPU device (for calling other CUDA libraries, e.g. cuBLAS).
    pub fn cuda_context(&self) -> Option<&Arc<CudaContext>> {
        match &self.kind {
            DeviceKind::Interpreter => None,
            DeviceKind::Cuda(d) => Some(&d.ctx),
        }
    }

    /// Whether two values denote the same device.
    pub fn same_as(&self, other: &Device) -> bool {
        match (&self.kind, &other.kind) {
            (DeviceKind::Interpreter, DeviceKind::Interpreter) => true,
            (DeviceKind::Cuda(a), DeviceKind::Cuda(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

fn interpret_requested() -> bool {
    std::env::var_os(INTERPRET_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// An ordered queue of work on a device. Kernels, copies and events on one
/// stream run in the order they were issued.
#[derive(Clone)]
pub struct Stream {
    pub(crate) device: Device,
    /// The CUDA stream (`None` on the interpreter).
    pub(crate) cuda: Option<Arc<CudaStream>>,
    /// The tile counter of the dynamic tile scheduler
    /// (`tile_ir::abi::TILE_COUNTER_PARAM`): a 4-byte device word, made at
    /// the first launch that needs it and zeroed on this stream before each
    /// such launch; held (locked) from that zeroing until the launch is
    /// issued, so that launches on this stream never share one (stream order
    /// runs them one after the other) and other streams have their own.
    pub(crate) tile_counter: TileCounter,
}

/// A stream's tile counter ([`Stream::tile_counter`]): shared by the
/// stream's clones, which are the same stream.
pub(crate) type TileCounter = Arc<std::sync::Mutex<Option<cudarc::driver::CudaSlice<u32>>>>;

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cuda {
            Some(s) => write!(f, "Stream({:?}, {:?})", self.device, s.cu_stream()),
            None => write!(f, "Stream({:?})", self.device),
        }
    }
}

impl Stream {
    /// The device the stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Waits until all work issued on this stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        match &self.cuda {
            None => Ok(()),
            Some(s) => s.synchronize().map_err(driver_err("cuStreamSynchronize")),
        }
    }

    /// Records an event: a point in this stream's work, for timing.
    pub fn record_event(&self) -> Result<Event> {
        match &self.cuda {
            None => Ok(Event { kind: EventKind::Host(Instant::now()) }),
            Some(s) => {
                let event =
                    s.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver_err("cuEventRecord"))?;
                Ok(Event { kind: EventKind::Cuda(event) })
            }
        }
    }

    /// Runs `f` (which issues work on this stream) and returns the device
    /// time it took in milliseconds, measured with events around it.
    pub fn time(&self, f: impl FnOnce() -> Result<()>) -> Result<f64> {
        let start = self.record_event()?;
        f()?;
        let end = self.record_event()?;
        start.elapsed_ms(&end)
    }

    /// The cudarc stream of a GPU device (for calling other CUDA libraries).
    pub fn cuda_stream(&self) -> Option<&Arc<CudaStream>> {
        self.cuda.as_ref()
    }
}

/// A recorded point in a stream's work: a CUDA event with timing, or a host
/// time stamp on the interpreter (which runs synchronously).
pub struct Event {
    kind: EventKind,
}

enum EventKind {
    Host(Instant),
    Cuda(CudaEvent),
}

impl Event {
    /// Milliseconds from `self` to `end` (waits for `end` to complete).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f64> {
        match (&self.kind, &end.kind) {
            (EventKind::Host(a), EventKind::Host(b)) => Ok(b.saturating_duration_since(*a).as_secs_f64() * 1e3),
            (EventKind::Cuda(a), EventKind::Cuda(b)) => {
                a.elapsed_ms(b).map(f64::from).map_err(driver_err("cuEventElapsedTime"))
            }
            _ => Err(Error::Usage("cannot time between events of different devices".into())),
        }
    }

    /// Waits until the work recorded before this event has finished.
    pub fn synchronize(&self) -> Result<()> {
        match &self.kind {
            EventKind::Host(_) => Ok(()),
            EventKind::Cuda(e) => e.synchronize().map_err(driver_err("cuEventSynchronize")),
        }
    }
}

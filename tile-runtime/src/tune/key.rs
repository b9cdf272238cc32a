//! What a tuning choice is keyed by: the device ([`DeviceId`]: name,
//! compute capability, SM count, driver version), the tuned kernel (its
//! name and a hash of every candidate's configuration, IR and PTX, so that
//! a rebuilt kernel never matches an old entry), and the shape bucket of
//! the arguments ([`bucket`]).
//!
//! Expects nothing of the launch; pure functions of the device and the
//! arguments. Guarantees keys that are equal only when every part is.

use serde::{Deserialize, Serialize};

use crate::cache::OnceMap;
use crate::device::{Device, DeviceKind};
use crate::launch::{KernelArg, KernelMeta};

use super::TunedKernel;

/// The device a choice was tuned on. Another GPU model, compute
/// capability, SM count (a MIG slice) or driver version is another device.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceId {
    /// The device's name (`NVIDIA H200`, or `interpreter`).
    pub name: String,
    /// The compute capability (`None` on the interpreter).
    pub compute_capability: Option<(u32, u32)>,
    /// Streaming multiprocessors (0 on the interpreter).
    pub multiprocessors: u32,
    /// `cuDriverGetVersion` (e.g. 12080; 0 on the interpreter).
    pub driver_version: i32,
}

impl DeviceId {
    /// The identity of `device`.
    pub fn of(device: &Device) -> DeviceId {
        match &device.kind {
            DeviceKind::Interpreter => {
                DeviceId { name: "interpreter".into(), compute_capability: None, multiprocessors: 0, driver_version: 0 }
            }
            DeviceKind::Cuda(d) => DeviceId {
                name: d.name.clone(),
                compute_capability: Some(d.compute_capability),
                multiprocessors: d.multiprocessors,
                driver_version: crate::driver::driver_version(),
            },
        }
    }
}

/// One choice's key (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub device: DeviceId,
    pub kernel: String,
    pub hash: String,
    pub bucket: String,
}

/// Dims up to this are kept exact in a bucket; larger ones are rounded up
/// to a power of two.
pub const EXACT_UP_TO: usize = 16;

/// One dimension's bucket: exact up to [`EXACT_UP_TO`], else the next power
/// of two (17..=32 → 32, 1000 → 1024, 4096 → 4096).
pub fn bucket_dim(d: usize) -> usize {
    if d <= EXACT_UP_TO {
        d
    } else {
        d.checked_next_power_of_two().unwrap_or(usize::MAX)
    }
}

/// The shape bucket of a launch's arguments: each tensor's shape with
/// every dim bucketed ([`bucket_dim`]), `x`-separated, the tensors
/// comma-separated in parameter order, and a `*` after a tensor whose rows
/// are not a multiple of 16 bytes (the TMA variants cannot take it, so its
/// fastest configuration may differ): `128x4096,4096x4096,128x4096`.
/// Scalars are not part of it.
pub fn bucket(args: &[KernelArg<'_>]) -> String {
    let mut parts = Vec::new();
    for arg in args {
        let Some(raw) = arg.raw() else { continue };
        let dims: Vec<String> = raw.shape.iter().map(|&d| bucket_dim(d).to_string()).collect();
        let row_bytes = raw.shape.last().copied().unwrap_or(0) * raw.dtype.size_bytes() as usize;
        let odd = raw.shape.len() > 1 && row_bytes % 16 != 0;
        parts.push(format!("{}{}", dims.join("x"), if odd { "*" } else { "" }));
    }
    parts.join(",")
}

/// A 64-bit FNV-1a hash, stable across builds and Rust versions.
pub(crate) struct Fnv(u64);

impl Fnv {
    pub fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

/// The hash of a tuned kernel's candidates: each one's configuration,
/// kernel name, IR and every variant's arch, schedule and PTX. Computed
/// once per [`TunedKernel`].
pub(crate) fn kernel_hash(tuned: &'static TunedKernel) -> String {
    static HASHES: std::sync::OnceLock<OnceMap<usize, String>> = std::sync::OnceLock::new();
    let key = tuned as *const TunedKernel as usize;
    let made = HASHES
        .get_or_init(OnceMap::default)
        .get_or_try_init(&key, || Ok::<_, std::convert::Infallible>(hash_candidates(tuned)));
    match made {
        Ok(h) => (*h).clone(),
        Err(never) => match never {},
    }
}

pub(crate) fn hash_candidates(tuned: &TunedKernel) -> String {
    let mut h = Fnv::new();
    h.write(tuned.name.as_bytes());
    for c in tuned.candidates {
        h.write(c.config.as_bytes());
        write_meta(&mut h, c.meta);
    }
    h.hex()
}

/// A kernel's name, IR and every variant's arch, schedule and PTX.
pub(crate) fn write_meta(h: &mut Fnv, meta: &KernelMeta) {
    h.write(meta.name.as_bytes());
    h.write(meta.ir.as_bytes());
    for t in meta.targets {
        h.write(t.arch.as_bytes());
        h.write(t.schedule.as_bytes());
        h.write(t.ptx.as_bytes());
    }
}

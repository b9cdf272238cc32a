//! Code-generation targets as data: what each one has.
//!
//! A [`Target`] is a small `Copy` name; [`Target::info`] gives its
//! [`TargetInfo`] (one file per target: [`sm80`], [`sm90a`]): the PTX
//! `.target` name, compute capability, lowest module `.version`, dynamic
//! shared memory per block, register file and the [`Feature`]s it has. The
//! instruction table ([`isa`]) says which PTX ISA version and which feature
//! each Thread IR instruction needs; the PTX emitter derives `.version` from
//! it and rejects an instruction whose feature the target lacks. Device
//! choice (which embedded target a GPU of some compute capability runs) is
//! [`Target::runs_on`] and [`Target::for_device_among`].
//!
//! To add a target (sm_100a, say): write `sm100a.rs` with its
//! [`TargetInfo`] (its features listed; a new instruction family gets a new
//! [`Feature`] and a row in [`isa`]), add the variant here, its arm in
//! [`Target::info`] and its place in [`Target::ALL`] (preference order).

pub mod isa;
pub mod sm80;
pub mod sm90a;
#[cfg(test)]
mod tests;

pub use isa::{requirement, Requirement};

/// A code-generation target.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Ampere and later: mma.sync, cp.async, ldmatrix.
    Sm80,
    /// Hopper with the arch-specific features (wgmma, setmaxnreg, TMA).
    Sm90a,
}

/// A hardware capability that some instructions need and some targets have.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// `cp.async` (global → shared, with commit and wait groups).
    CpAsync,
    /// `ldmatrix.sync.aligned.m8n8`.
    Ldmatrix,
    /// `mma.sync.aligned.m16n8k16` on f16 and bf16.
    MmaSync,
    /// `mbarrier.init` and `mbarrier.arrive` in `.shared::cta`.
    Mbarrier,
    /// mbarrier transaction counts (`arrive.expect_tx`) and `try_wait`.
    MbarrierTx,
    /// Thread-block clusters: `.cluster`-scoped fences
    /// (`fence.mbarrier_init.release.cluster`) and cluster launches.
    Clusters,
    /// `fence.proxy.async`: orders generic-proxy accesses with TMA and wgmma.
    FenceProxyAsync,
    /// The tensor memory accelerator: `cp.async.bulk.tensor` and bulk groups.
    Tma,
    /// `wgmma.mma_async` and its fence, commit and wait (arch-specific `a`).
    Wgmma,
    /// `setmaxnreg` (arch-specific `a`).
    Setmaxnreg,
    /// `elect.sync`.
    ElectSync,
    /// Programmatic dependent launch: `griddepcontrol.wait` (and the launch
    /// attribute the runtime sets).
    GridDependency,
    /// bf16 beyond storage, mma and conversion from f32: `cvt.f32.bf16`,
    /// `atom.add.noftz.bf16`.
    Bf16Native,
}

/// What one target has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetInfo {
    /// The target described.
    pub target: Target,
    /// The PTX `.target` name (`sm_80`, `sm_90a`), also the `TILE_ARCHS` name.
    pub name: &'static str,
    /// major·10 + minor (80, 90).
    pub compute_capability: u32,
    /// Arch-specific (`a`): the code runs only on devices of this major
    /// version, since `a` features are not forward compatible. Otherwise it
    /// runs on every device of this compute capability or later.
    pub arch_specific: bool,
    /// The lowest `.version` a module for this target declares (major·10 +
    /// minor); instructions may raise it ([`isa`]).
    pub base_ptx_version: u32,
    /// The most dynamic shared memory one block may have, in bytes.
    pub shared_limit: u32,
    /// The SM's register file and its split in warp-specialized kernels.
    pub registers: RegisterFile,
    /// What the target's instructions may use; [`isa::requirement`] names
    /// the feature each instruction needs.
    pub features: &'static [Feature],
}

/// The register file of one SM, in 32-bit registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterFile {
    /// Registers per SM, shared by every resident thread.
    pub per_sm: u32,
    /// The most one thread may have.
    pub per_thread: u32,
    /// How a warp-specialized kernel splits the file with `setmaxnreg`;
    /// `None` where the target has no `setmaxnreg`.
    pub split: Option<RegisterSplit>,
}

/// Registers per thread of a warp-specialized kernel's two roles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterSplit {
    /// What the producer warpgroup keeps (`setmaxnreg.dec`): enough to issue
    /// TMA loads and wait on barriers.
    pub producer: u32,
    /// The most a consumer thread takes (`setmaxnreg.inc`), however few
    /// consumers there are.
    pub consumer_max: u32,
}

/// Threads of a warp-specialized kernel's producer: one warpgroup.
pub const PRODUCER_THREADS: u32 = 128;

impl TargetInfo {
    /// Whether the target has `feature`.
    pub fn has(&self, feature: Feature) -> bool {
        self.features.contains(&feature)
    }

    /// Registers per thread a block of `threads` threads holds from its
    /// launch when `blocks` blocks share the SM: the file's equal share,
    /// rounded down to a multiple of 8 (`setmaxnreg`'s granularity; what
    /// ptxas allocates at entry to a kernel with `.maxntid threads` and
    /// `.minnctapersm blocks`), at most the per-thread limit.
    pub fn entry_regs(&self, threads: u32, blocks: u32) -> u32 {
        (self.registers.per_sm / (threads * blocks).max(1)).min(self.registers.per_thread) / 8 * 8
    }

    /// Registers per consumer thread of a warp-specialized kernel whose
    /// `consumer_threads` share the block with one producer warpgroup at
    /// [`RegisterSplit::producer`] (one block per SM); see
    /// [`TargetInfo::consumer_regs_after`].
    pub fn consumer_regs(&self, consumer_threads: u32) -> Option<u32> {
        let split = self.registers.split.as_ref()?;
        self.consumer_regs_after(split.producer, consumer_threads, 1)
    }

    /// Registers per consumer thread when the producer warpgroup drops to
    /// `producer` (`setmaxnreg.dec`) and `blocks` blocks share the SM: an
    /// equal share of what the BLOCK holds from its launch
    /// ([`TargetInfo::entry_regs`] per thread) less the producer's,
    /// rounded down to a multiple of 8, at most
    /// [`RegisterSplit::consumer_max`]. (ptxas 12.9 allocates exactly that
    /// entry count at 384 threads (168), 640 (96) and two blocks of 256
    /// (128); one block of 256 gets 240, the cap, below the 248 assumed here,
    /// where the consumers then take nothing from the pool.)
    /// `setmaxnreg.inc` takes registers only from the block's own pool
    /// (what its warps released), and blocks until there are enough: a
    /// share of the whole SM's file (the rule before) can exceed the pool
    /// and hang the block (on the H200: a producer at 32 registers with two
    /// consumer warpgroups at 240, 1,024 registers short). `None` without
    /// `setmaxnreg`.
    pub fn consumer_regs_after(&self, producer: u32, consumer_threads: u32, blocks: u32) -> Option<u32> {
        let split = self.registers.split.as_ref()?;
        let total = PRODUCER_THREADS + consumer_threads;
        let entry = self.entry_regs(total, blocks);
        let pool = entry * total - PRODUCER_THREADS * producer.min(entry);
        Some((pool / consumer_threads.max(1) / 8 * 8).min(split.consumer_max))
    }
}

impl Target {
    /// Every target, in the order a device that runs several prefers them
    /// (the most specific first).
    pub const ALL: [Target; 2] = [Target::Sm90a, Target::Sm80];

    /// The known targets' names for messages, lowest compute capability
    /// first: "`sm_80` and `sm_90a`".
    pub fn known_names() -> String {
        let mut all = Target::ALL;
        all.sort_by_key(|t| t.compute_capability());
        let names: Vec<String> = all.iter().map(|t| format!("`{}`", t.name())).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => names.concat(),
        }
    }

    /// What the target has.
    pub fn info(self) -> &'static TargetInfo {
        match self {
            Target::Sm80 => &sm80::SM80,
            Target::Sm90a => &sm90a::SM90A,
        }
    }

    /// The `.target` name: `sm_80`, `sm_90a`.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The target of a `.target` / `TILE_ARCHS` name (`sm_80`, `sm_90a`;
    /// surrounding spaces ignored); `None` for any other.
    pub fn from_name(name: &str) -> Option<Target> {
        let name = name.trim();
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Compute capability as major*10+minor (80, 90).
    pub fn compute_capability(self) -> u32 {
        self.info().compute_capability
    }

    /// Whether the target has `feature`.
    pub fn has(self, feature: Feature) -> bool {
        self.info().has(feature)
    }

    /// Whether a device of compute capability `major.minor` runs this
    /// target's code: sm_80 on every 8.0 and later device, sm_90a only on
    /// 9.x (see [`TargetInfo::arch_specific`]).
    pub fn runs_on(self, major: u32, minor: u32) -> bool {
        let info = self.info();
        let cc = info.compute_capability;
        (major, minor) >= (cc / 10, cc % 10) && (!info.arch_specific || major == cc / 10)
    }

    /// Whether a device of compute capability `major.minor` runs this
    /// target's SASS (a cubin assembled by `ptxas -arch=<name>`), as opposed
    /// to its PTX ([`Target::runs_on`], which the driver's JIT compiles for
    /// any later device). CUDA's binary compatibility: a cubin for `sm_XY`
    /// runs on `X.Z` with `Z ≥ Y`, the same major version only; an
    /// arch-specific (`a`) cubin only on exactly `X.Y`. So the sm_80 cubin
    /// runs on every 8.x device and the sm_90a cubin only on 9.0.
    pub fn cubin_runs_on(self, major: u32, minor: u32) -> bool {
        let info = self.info();
        let (m, n) = (info.compute_capability / 10, info.compute_capability % 10);
        major == m && if info.arch_specific { minor == n } else { minor >= n }
    }

    /// The preferred target ([`Target::ALL`] order) that a device of compute
    /// capability `major.minor` runs, if any.
    pub fn for_device(major: u32, minor: u32) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.runs_on(major, minor))
    }

    /// The preferred target among `embedded` (the targets a kernel was
    /// compiled for) that a device of compute capability `major.minor`
    /// runs: what the runtime launches.
    pub fn for_device_among(major: u32, minor: u32, embedded: &[Target]) -> Option<Target> {
        Target::ALL.into_iter().find(|t| embedded.contains(t) && t.runs_on(major, minor))
    }
}

impl Feature {
    /// The first target ([`Target::compute_capability`] order) that has the
    /// feature: what a kernel using it must be compiled for.
    pub fn lowest_target(self) -> Option<Target> {
        Target::ALL.into_iter().filter(|t| t.has(self)).min_by_key(|t| t.compute_capability())
    }
}

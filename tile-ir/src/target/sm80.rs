//! sm_80 (Ampere, A100): the portable target. Its code runs on every GPU of
//! compute capability 8.0 and later.

use super::{Feature, RegisterFile, Target, TargetInfo};

/// sm_80's description: PTX ISA 8.0 and later, 166,912 bytes (163 KB) of
/// shared memory per block, cp.async, ldmatrix, mma.sync and mbarrier.
pub const SM80: TargetInfo = TargetInfo {
    target: Target::Sm80,
    name: "sm_80",
    compute_capability: 80,
    arch_specific: false,
    base_ptx_version: 80,
    // A100: 163 KB of the SM's 164 KB.
    shared_limit: 166_912,
    registers: RegisterFile { per_sm: 65_536, per_thread: 255, split: None },
    features: &[Feature::CpAsync, Feature::Ldmatrix, Feature::MmaSync, Feature::Mbarrier],
};

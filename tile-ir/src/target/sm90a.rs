//! sm_90a (Hopper, H100/H200) with its arch-specific features (wgmma,
//! setmaxnreg): everything sm_80 has, plus TMA, transaction mbarriers,
//! clusters and the async proxy. Its code runs only on 9.x devices.

use super::{Feature, RegisterFile, RegisterSplit, Target, TargetInfo};

/// sm_90a's description: sm_80's features plus wgmma, TMA, transaction
/// mbarriers, clusters, setmaxnreg and elect.sync; 232,448 bytes (227 KB) of
/// shared memory per block; the register split of warp-specialized kernels.
pub const SM90A: TargetInfo = TargetInfo {
    target: Target::Sm90a,
    name: "sm_90a",
    compute_capability: 90,
    arch_specific: true,
    base_ptx_version: 80,
    // H100/H200: 227 KB of the SM's 228 KB.
    shared_limit: 232_448,
    // A producer warpgroup keeps 40; one consumer warpgroup gets 240, two
    // get 232 each ([`TargetInfo::consumer_regs`]).
    registers: RegisterFile {
        per_sm: 65_536,
        per_thread: 255,
        split: Some(RegisterSplit { producer: 40, consumer_max: 240 }),
    },
    features: &[
        Feature::CpAsync,
        Feature::Ldmatrix,
        Feature::MmaSync,
        Feature::Mbarrier,
        Feature::MbarrierTx,
        Feature::Clusters,
        Feature::FenceProxyAsync,
        Feature::Tma,
        Feature::Wgmma,
        Feature::Setmaxnreg,
        Feature::ElectSync,
        Feature::GridDependency,
        Feature::Bf16Native,
    ],
};

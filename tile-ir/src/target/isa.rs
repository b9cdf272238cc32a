//! The instruction table: the PTX ISA version and the [`Feature`] each
//! Thread IR instruction needs, in the form the printer writes it (versions
//! checked with ptxas 12.9).
//!
//! One row per [`Inst`] variant (the match has no catch-all, so a new
//! variant must get a row), and for [`Inst::Op`] a row per opcode family
//! that needs more than the base ISA ([`OP_ROWS`]). The PTX emitter takes the
//! module's `.version` from it and rejects, per target, an instruction whose
//! feature the target lacks ([`crate::ptx::try_emit`]).

use super::Feature;
use crate::thread_ir::{Inst, Operand, Special};

/// What one instruction needs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The lowest PTX ISA version (major·10 + minor) that has it.
    pub ptx_version: u32,
    /// The target capability it needs; `None` for the base ISA.
    pub feature: Option<Feature>,
}

/// PTX ISA 7.0, the first with sm_80: every instruction of the base set
/// (and cp.async, ldmatrix, mma.sync m16n8k16) exists in it.
pub const BASE_PTX_VERSION: u32 = 70;

const fn needs(ptx_version: u32, feature: Option<Feature>) -> Requirement {
    Requirement { ptx_version, feature }
}

const BASE: Requirement = needs(BASE_PTX_VERSION, None);

/// The [`Inst::Op`] opcode families beyond the base ISA: an opcode matches a
/// row when it starts with the row's prefix.
pub const OP_ROWS: &[(&str, Requirement)] = &[
    ("cvt.f32.bf16", needs(78, Some(Feature::Bf16Native))),
    ("createpolicy.", needs(74, None)),
    ("mapa.", needs(78, Some(Feature::Clusters))),
];

/// What `inst` needs.
pub fn requirement(inst: &Inst) -> Requirement {
    use Feature::*;
    match inst {
        // `%cluster_ctarank` is PTX 7.8, sm_90 (any opcode reading it).
        Inst::Op { args, .. } if args.contains(&Operand::Special(Special::ClusterCtaRank)) => needs(78, Some(Clusters)),
        Inst::Op { op, .. } => OP_ROWS.iter().find(|(prefix, _)| op.starts_with(prefix)).map_or(BASE, |(_, r)| *r),
        Inst::Pack { .. }
        | Inst::Unpack { .. }
        | Inst::Ld { .. }
        | Inst::LdParam { .. }
        | Inst::St { .. }
        | Inst::ShflBfly { .. }
        | Inst::WarpBroadcast { .. }
        | Inst::BarSync
        | Inst::NamedBarSync { .. }
        | Inst::BarrierSync { .. }
        | Inst::NamedBarArrive { .. }
        | Inst::BarrierArrive { .. }
        | Inst::BarRedOr { .. }
        | Inst::Exit
        | Inst::Nanosleep { .. }
        | Inst::Printf { .. } => BASE,
        Inst::AtomAdd { ty, .. } if *ty == "bf16" => needs(78, Some(Bf16Native)),
        Inst::AtomAdd { .. } => BASE,
        Inst::CpAsync { .. } | Inst::CpAsyncCommit | Inst::CpAsyncWait { .. } => needs(70, Some(CpAsync)),
        Inst::Ldmatrix { .. } => needs(70, Some(Ldmatrix)),
        Inst::Mma { .. } => needs(70, Some(MmaSync)),
        Inst::MbarInit { .. } | Inst::MbarArrive { .. } => needs(78, Some(Mbarrier)),
        Inst::MbarWait { .. } => needs(78, Some(MbarrierTx)),
        Inst::MbarArriveExpectTx { .. } => needs(80, Some(MbarrierTx)),
        Inst::FenceMbarrierInit => needs(80, Some(Clusters)),
        Inst::MbarArriveCluster { .. } => needs(80, Some(Clusters)),
        // `.release` / `.acquire` on `barrier.cluster` are PTX 8.0.
        Inst::ClusterArrive | Inst::ClusterWait => needs(80, Some(Clusters)),
        Inst::GridDepWait => needs(78, Some(GridDependency)),
        Inst::FenceProxyAsync => needs(80, Some(FenceProxyAsync)),
        Inst::TensorMapAddr { .. } => needs(77, None),
        // The `.shared::cta` destination form is PTX 8.6.
        Inst::TmaLoad { cta_dst: true, .. } => needs(86, Some(Tma)),
        Inst::TmaLoad { multicast: Some(_), .. } => needs(80, Some(Clusters)),
        Inst::TmaLoad { .. }
        | Inst::TmaStore { .. }
        | Inst::TmaPrefetch { .. }
        | Inst::BulkCommit
        | Inst::BulkWaitRead { .. } => needs(80, Some(Tma)),
        Inst::WgmmaFence | Inst::WgmmaCommit | Inst::WgmmaWait { .. } | Inst::Wgmma { .. } => needs(80, Some(Wgmma)),
        Inst::SetMaxNreg { .. } => needs(80, Some(Setmaxnreg)),
        Inst::ElectSync { .. } => needs(80, Some(ElectSync)),
    }
}

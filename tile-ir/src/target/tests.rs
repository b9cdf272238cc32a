//! The target table against the PTX it prints: every instruction's
//! requirement, the rejections per target, device choice, and the target
//! files against the instruction table.

use super::isa::{requirement, BASE_PTX_VERSION, OP_ROWS};
use super::{Feature, Target, PRODUCER_THREADS};
use crate::ptx::first_unsupported;
use crate::thread_ir::*;

/// The number of [`Inst`] variants; [`variant`] numbers them.
const VARIANTS: usize = 45;

/// A distinct number per [`Inst`] variant (no catch-all: a new variant
/// must be counted here, and then get a sample in [`samples`]).
fn variant(inst: &Inst) -> usize {
    match inst {
        Inst::Op { .. } => 0,
        Inst::Pack { .. } => 1,
        Inst::Unpack { .. } => 2,
        Inst::Ld { .. } => 3,
        Inst::LdParam { .. } => 4,
        Inst::St { .. } => 5,
        Inst::AtomAdd { .. } => 6,
        Inst::ShflBfly { .. } => 7,
        Inst::BarSync => 8,
        Inst::CpAsync { .. } => 9,
        Inst::CpAsyncCommit => 10,
        Inst::CpAsyncWait { .. } => 11,
        Inst::Ldmatrix { .. } => 12,
        Inst::Mma { .. } => 13,
        Inst::MbarInit { .. } => 14,
        Inst::MbarArriveExpectTx { .. } => 15,
        Inst::MbarArrive { .. } => 16,
        Inst::MbarWait { .. } => 17,
        Inst::FenceMbarrierInit => 18,
        Inst::FenceProxyAsync => 19,
        Inst::TensorMapAddr { .. } => 20,
        Inst::TmaLoad { .. } => 21,
        Inst::TmaStore { .. } => 22,
        Inst::BulkCommit => 23,
        Inst::BulkWaitRead { .. } => 24,
        Inst::WgmmaFence => 25,
        Inst::WgmmaCommit => 26,
        Inst::WgmmaWait { .. } => 27,
        Inst::Wgmma { .. } => 28,
        Inst::SetMaxNreg { .. } => 29,
        Inst::ElectSync { .. } => 30,
        Inst::NamedBarSync { .. } => 31,
        Inst::Exit => 32,
        Inst::NamedBarArrive { .. } => 33,
        Inst::Printf { .. } => 34,
        Inst::Nanosleep { .. } => 35,
        Inst::GridDepWait => 36,
        Inst::WarpBroadcast { .. } => 37,
        Inst::MbarArriveCluster { .. } => 38,
        Inst::ClusterArrive => 39,
        Inst::ClusterWait => 40,
        Inst::BarrierSync { .. } => 41,
        Inst::BarRedOr { .. } => 42,
        Inst::TmaPrefetch { .. } => 43,
        Inst::BarrierArrive { .. } => 44,
    }
}

fn smem(offset: i64) -> Address {
    Address { base: Operand::Symbol(SMEM.into()), offset }
}

fn r(i: u32) -> Reg {
    Reg(i)
}

/// Every instruction form, each with the requirement it must have (written
/// out here, apart from the table, so that a changed row fails).
fn samples() -> Vec<(Inst, u32, Option<Feature>)> {
    use Feature::*;
    let op = |op: &str| Inst::Op { op: op.into(), dst: r(0), args: vec![Operand::Reg(r(1))] };
    let ld = Inst::Ld { space: Space::Global, ty: "f32", dsts: vec![r(0)], addr: smem(0), region: None };
    let st = Inst::St { space: Space::Shared, ty: "b32", srcs: vec![r(0).into()], addr: smem(0), region: None };
    let atom = |ty| Inst::AtomAdd { space: Space::Global, ty, dst: r(0), addr: smem(0), src: r(1).into() };
    let tma_load = |cta_dst, multicast| Inst::TmaLoad {
        dst: smem(1024),
        tmap: r(2).into(),
        coords: vec![r(0).into(), Operand::Imm(64)],
        mbar: smem(8),
        cache_hint: None,
        cta_dst,
        multicast,
        region: None,
    };
    let wgmma = |a| Inst::Wgmma {
        n: 8,
        ab: "f16",
        d: (0..4).map(r).collect(),
        a,
        b_desc: r(5).into(),
        scale_d: Operand::Imm(1),
        neg_a: false,
        neg_b: false,
        trans_a: false,
        trans_b: false,
        regions: vec![],
    };
    vec![
        (op("add.s32"), 70, None),
        (op("cvt.rn.bf16.f32"), 70, None),
        (op("cvt.f32.bf16"), 78, Some(Bf16Native)),
        (op("createpolicy.fractional.L2::evict_first.b64"), 74, None),
        (Inst::Pack { dst: r(0), lo: r(1), hi: r(2) }, 70, None),
        (Inst::Unpack { lo: r(1), hi: r(2), src: r(0) }, 70, None),
        (ld, 70, None),
        (Inst::LdParam { ty: "u64", dst: r(0), name: "out".into() }, 70, None),
        (st, 70, None),
        (atom("f32"), 70, None),
        (atom("f16"), 70, None),
        (atom("bf16"), 78, Some(Bf16Native)),
        (Inst::ShflBfly { dst: r(0), src: r(1), lane_mask: 16 }, 70, None),
        (Inst::WarpBroadcast { dst: r(0), src: r(1) }, 70, None),
        (Inst::BarSync, 70, None),
        (
            Inst::CpAsync { bytes: 16, dst: smem(0), src: smem(0), src_bytes: Operand::Imm(16), region: None },
            70,
            Some(CpAsync),
        ),
        (Inst::CpAsyncCommit, 70, Some(CpAsync)),
        (Inst::CpAsyncWait { pending: 1 }, 70, Some(CpAsync)),
        (Inst::Ldmatrix { trans: true, dsts: vec![r(0), r(1)], addr: smem(0), region: None }, 70, Some(Ldmatrix)),
        (
            Inst::Mma { ab: "bf16", d: [r(0), r(1), r(2), r(3)], a: [r(4); 4], b: [r(5); 2], c: [r(6); 4] },
            70,
            Some(MmaSync),
        ),
        (Inst::MbarInit { addr: smem(0), count: Operand::Imm(1) }, 78, Some(Mbarrier)),
        (Inst::MbarArriveExpectTx { addr: smem(0), tx_bytes: Operand::Imm(16) }, 80, Some(MbarrierTx)),
        (Inst::MbarArrive { addr: smem(0) }, 78, Some(Mbarrier)),
        (Inst::MbarWait { addr: smem(0), parity: Operand::Imm(0), pred: r(7) }, 78, Some(MbarrierTx)),
        (Inst::FenceMbarrierInit, 80, Some(Clusters)),
        (Inst::FenceProxyAsync, 80, Some(FenceProxyAsync)),
        (Inst::TensorMapAddr { dst: r(2), param: "tmap".into() }, 77, None),
        (tma_load(false, None), 80, Some(Tma)),
        (tma_load(true, None), 86, Some(Tma)),
        (tma_load(false, Some(r(8).into())), 80, Some(Clusters)),
        (Inst::MbarArriveCluster { addr: r(1).into() }, 80, Some(Clusters)),
        (Inst::ClusterArrive, 80, Some(Clusters)),
        (Inst::ClusterWait, 80, Some(Clusters)),
        (op("mapa.shared::cluster.u32"), 78, Some(Clusters)),
        (
            Inst::Op { op: "mov.u32".into(), dst: r(0), args: vec![Operand::Special(Special::ClusterCtaRank)] },
            78,
            Some(Clusters),
        ),
        (Inst::TmaStore { tmap: r(2).into(), coords: vec![r(0).into()], src: smem(0), region: None }, 80, Some(Tma)),
        (
            Inst::TmaPrefetch { tmap: r(2).into(), coords: vec![r(0).into(), r(1).into()], cache_hint: None },
            80,
            Some(Tma),
        ),
        (
            Inst::TmaPrefetch { tmap: r(2).into(), coords: vec![r(0).into()], cache_hint: Some(r(3).into()) },
            80,
            Some(Tma),
        ),
        (Inst::BulkCommit, 80, Some(Tma)),
        (Inst::BulkWaitRead { pending: 0 }, 80, Some(Tma)),
        (Inst::WgmmaFence, 80, Some(Wgmma)),
        (Inst::WgmmaCommit, 80, Some(Wgmma)),
        (Inst::WgmmaWait { pending: 0 }, 80, Some(Wgmma)),
        (wgmma(WgmmaA::Desc(r(4).into())), 80, Some(Wgmma)),
        (wgmma(WgmmaA::Regs([r(4); 4])), 80, Some(Wgmma)),
        (Inst::SetMaxNreg { inc: true, count: 240 }, 80, Some(Setmaxnreg)),
        (Inst::SetMaxNreg { inc: false, count: 40 }, 80, Some(Setmaxnreg)),
        (Inst::ElectSync { pred: r(7) }, 80, Some(ElectSync)),
        (Inst::Nanosleep { ns: 0 }, 70, None),
        (Inst::GridDepWait, 78, Some(GridDependency)),
        (Inst::NamedBarSync { id: 1, threads: 128 }, 70, None),
        (Inst::BarrierSync { id: 1, threads: 256 }, 70, None),
        (Inst::Exit, 70, None),
        (Inst::NamedBarArrive { id: 2, threads: 256 }, 70, None),
        (Inst::BarrierArrive { id: 6, threads: 256 }, 70, None),
        (Inst::BarRedOr { dst: r(7), src: r(7), id: Operand::Imm(4), threads: 128 }, 70, None),
        (Inst::Printf { id: 0, format: "%d\n".into(), args: vec![(r(1), "s32")] }, 70, None),
    ]
}

/// A function `t` whose body is `inst` alone.
fn function_of(inst: Inst) -> Function {
    let mut f = Function {
        name: "t".into(),
        params: vec![("tmap".into(), TENSOR_MAP_PARAM), ("out".into(), ".u64")],
        threads: 128,
        shared_bytes: 4096,
        ..Function::default()
    };
    for class in [RegClass::B32, RegClass::B32, RegClass::B64, RegClass::B32, RegClass::B64, RegClass::B64] {
        f.new_reg(class);
    }
    f.new_reg(RegClass::F32);
    f.new_reg(RegClass::Pred);
    f.new_reg(RegClass::B16);
    f.body.push(Stmt::Inst { inst, guard: None });
    f
}

fn version_line(ptx: &str) -> &str {
    ptx.lines().find(|l| l.starts_with(".version ")).unwrap_or("")
}

#[test]
fn the_samples_cover_every_instruction() {
    let mut seen = [false; VARIANTS];
    for (inst, ..) in samples() {
        seen[variant(&inst)] = true;
    }
    let missing: Vec<usize> = (0..VARIANTS).filter(|&v| !seen[v]).collect();
    assert!(missing.is_empty(), "variants without a sample: {missing:?}");
}

#[test]
fn every_instruction_has_its_requirement_and_prints_its_version() {
    for (inst, version, feature) in samples() {
        let op = inst.opcode();
        assert_eq!(requirement(&inst).ptx_version, version, "{op}");
        assert_eq!(requirement(&inst).feature, feature, "{op}");
        for target in Target::ALL.into_iter().filter(|t| feature.is_none_or(|f| t.has(f))) {
            let f = function_of(inst.clone());
            let expected = version.max(target.info().base_ptx_version);
            assert_eq!(crate::ptx::ptx_version(&f, target), expected, "{op} on {}", target.name());
            // `try_emit` is this check and `emit` (called apart here so that
            // these test functions stay out of the PTX snapshots).
            assert!(first_unsupported(&f, target).is_none(), "{op} on {}", target.name());
            let ptx = crate::ptx::emit(&f, target);
            assert_eq!(version_line(&ptx), format!(".version {}.{}", expected / 10, expected % 10), "{op}");
        }
    }
}

#[test]
fn sm80_rejects_every_hopper_feature_with_the_message() {
    let hopper: Vec<Feature> =
        Target::Sm90a.info().features.iter().copied().filter(|&f| !Target::Sm80.has(f)).collect();
    assert!(hopper.contains(&Feature::Wgmma) && hopper.contains(&Feature::Tma), "{hopper:?}");
    for feature in hopper {
        let users: Vec<Inst> = samples().into_iter().filter(|s| s.2 == Some(feature)).map(|s| s.0).collect();
        assert!(!users.is_empty(), "no instruction needs {feature:?}");
        for inst in users {
            let op = inst.opcode();
            let f = function_of(inst);
            let err = crate::ptx::try_emit(&f, Target::Sm80).expect_err(&op);
            assert_eq!(
                err.message,
                format!("kernel `t` uses `{op}`, which needs sm_90 or later; compile it for sm_90a, not sm_80")
            );
            assert!(first_unsupported(&f, Target::Sm90a).is_none(), "{op}");
        }
    }
}

#[test]
fn the_first_unsupported_instruction_is_named() {
    let mut f = function_of(Inst::CpAsyncCommit);
    f.body.push(Stmt::If {
        cond: r(7),
        negate: false,
        uniform: true,
        then: vec![Stmt::Inst { inst: Inst::WgmmaFence, guard: None }],
        otherwise: vec![],
    });
    f.body.push(Stmt::Inst { inst: Inst::ElectSync { pred: r(7) }, guard: None });
    let err = crate::ptx::try_emit(&f, Target::Sm80).unwrap_err();
    assert!(err.message.contains("`wgmma.fence.sync.aligned`"), "{}", err.message);
}

#[test]
fn devices_pick_the_targets_they_run() {
    use Target::*;
    // (major, minor, runs sm_80, runs sm_90a, the preferred target)
    let cases = [
        (7, 5, false, false, None),
        (8, 0, true, false, Some(Sm80)),
        (8, 6, true, false, Some(Sm80)),
        (8, 9, true, false, Some(Sm80)),
        (9, 0, true, true, Some(Sm90a)),
        (10, 0, true, false, Some(Sm80)),
        (12, 0, true, false, Some(Sm80)),
    ];
    for (major, minor, sm80, sm90a, preferred) in cases {
        assert_eq!(Sm80.runs_on(major, minor), sm80, "sm_80 on {major}.{minor}");
        assert_eq!(Sm90a.runs_on(major, minor), sm90a, "sm_90a on {major}.{minor}");
        assert_eq!(Target::for_device(major, minor), preferred, "{major}.{minor}");
        assert_eq!(Target::for_device_among(major, minor, &Target::ALL), preferred, "{major}.{minor}");
    }
    // What the runtime does with the targets a kernel embeds.
    assert_eq!(Target::for_device_among(9, 0, &[Sm80, Sm90a]), Some(Sm90a));
    assert_eq!(Target::for_device_among(9, 0, &[Sm80]), Some(Sm80));
    assert_eq!(Target::for_device_among(8, 6, &[Sm90a]), None);
    assert_eq!(Target::for_device_among(10, 0, &[Sm90a]), None);
    assert_eq!(Target::for_device_among(10, 0, &[Sm90a, Sm80]), Some(Sm80));
    assert_eq!(Target::for_device_among(9, 0, &[]), None);
}

#[test]
fn cubins_run_on_their_major_version_only() {
    use Target::*;
    // (major, minor, runs the sm_80 cubin, runs the sm_90a cubin)
    let cases = [
        (7, 5, false, false),
        (8, 0, true, false),
        (8, 6, true, false),
        (8, 9, true, false),
        (9, 0, false, true),
        (9, 1, false, false),
        (10, 0, false, false),
        (12, 0, false, false),
    ];
    for (major, minor, sm80, sm90a) in cases {
        assert_eq!(Sm80.cubin_runs_on(major, minor), sm80, "sm_80 cubin on {major}.{minor}");
        assert_eq!(Sm90a.cubin_runs_on(major, minor), sm90a, "sm_90a cubin on {major}.{minor}");
        // Whatever runs the SASS runs the PTX too.
        for t in [Sm80, Sm90a] {
            assert!(!t.cubin_runs_on(major, minor) || t.runs_on(major, minor), "{t:?} on {major}.{minor}");
        }
    }
}

#[test]
fn the_target_files_agree_with_the_table() {
    for t in Target::ALL {
        let info = t.info();
        assert_eq!(info.target, t);
        assert_eq!(Target::from_name(info.name), Some(t));
        assert_eq!(Target::from_name(&format!(" {} ", info.name)), Some(t));
        assert!(info.base_ptx_version >= BASE_PTX_VERSION, "{}", info.name);
        assert_eq!(info.has(Feature::Setmaxnreg), info.registers.split.is_some(), "{}", info.name);
        // Every feature a target lists is needed by some instruction.
        for &f in info.features {
            assert!(samples().iter().any(|s| s.2 == Some(f)), "{} lists {f:?}, which no instruction needs", info.name);
        }
    }
    assert_eq!(Target::from_name("sm_75"), None);
    // Every feature an instruction needs is on some target, and the lowest one names it.
    for (inst, _, feature) in samples() {
        if let Some(f) = feature {
            let lowest = f.lowest_target().unwrap_or_else(|| panic!("{f:?} ({}) is on no target", inst.opcode()));
            assert!(lowest.has(f));
        }
    }
    assert_eq!(Feature::Wgmma.lowest_target(), Some(Target::Sm90a));
    assert_eq!(Feature::CpAsync.lowest_target(), Some(Target::Sm80));
    // sm_90a has everything sm_80 has.
    for &f in Target::Sm80.info().features {
        assert!(Target::Sm90a.has(f), "{f:?}");
    }
    // The opcode rows are what `requirement` answers for those opcodes.
    for (prefix, row) in OP_ROWS {
        let inst = Inst::Op { op: format!("{prefix}x"), dst: r(0), args: vec![] };
        assert_eq!(requirement(&inst), *row, "{prefix}");
    }
}

#[test]
fn shared_memory_and_registers_per_target() {
    let (sm80, sm90a) = (Target::Sm80.info(), Target::Sm90a.info());
    assert_eq!((sm80.compute_capability, sm90a.compute_capability), (80, 90));
    assert_eq!((sm80.name, sm90a.name), ("sm_80", "sm_90a"));
    assert_eq!((sm80.shared_limit, sm90a.shared_limit), (166_912, 232_448));
    assert_eq!((sm80.registers.per_sm, sm80.registers.per_thread), (65_536, 255));
    assert_eq!((sm90a.registers.per_sm, sm90a.registers.per_thread), (65_536, 255));
    assert_eq!(sm90a.registers.split.as_ref().map(|s| s.producer), Some(40));
    // One consumer warpgroup gets the cap, two an equal share of the rest.
    assert_eq!(sm90a.consumer_regs(128), Some(240));
    assert_eq!(sm90a.consumer_regs(256), Some(232));
    assert_eq!(sm90a.consumer_regs(384), Some(152));
    assert_eq!(sm80.consumer_regs(128), None);
    // 512 consumer threads (640 in all): 96 each at entry, so 104, not the
    // 112 an equal share of the SM's whole file gives (1,024 short of the
    // block's pool: the tuner's 128x256 candidate over 512 threads hung).
    assert_eq!(sm90a.entry_regs(640, 1), 96);
    assert_eq!(sm90a.consumer_regs(512), Some(104));
    // The persistent loop's producer at 32 with two consumer warpgroups: 232.
    assert_eq!(sm90a.consumer_regs_after(32, 256, 1), Some(232));
    assert_eq!(sm90a.consumer_regs_after(24, 256, 1), Some(240));
    assert_eq!(sm90a.consumer_regs_after(24, 128, 2), Some(232));
}

/// `setmaxnreg.inc` takes registers only from the block's own pool (what it
/// holds from its launch, released by `setmaxnreg.dec`) and blocks until it
/// has enough: for every split, what the consumers take must fit in what
/// the producer releases.
#[test]
fn register_splits_fit_the_blocks_pool() {
    let info = Target::Sm90a.info();
    for blocks in [1, 2] {
        for consumer_threads in [128, 256, 384, 512, 640, 768] {
            let total = PRODUCER_THREADS + consumer_threads;
            let entry = info.entry_regs(total, blocks);
            for producer in (24..=entry.min(64)).step_by(8) {
                let c = info.consumer_regs_after(producer, consumer_threads, blocks).unwrap();
                assert!(c % 8 == 0, "{producer} {consumer_threads} {blocks}: {c}");
                let released = PRODUCER_THREADS * (entry - producer);
                let taken = consumer_threads * c.saturating_sub(entry);
                assert!(taken <= released, "producer {producer}, {consumer_threads} consumers, {blocks} blocks: {c}");
                assert!(entry * total * blocks <= info.registers.per_sm);
            }
        }
    }
    assert!(Target::Sm90a.has(Feature::Wgmma) && Target::Sm90a.has(Feature::Tma));
    assert!(!Target::Sm80.has(Feature::Wgmma) && !Target::Sm80.has(Feature::Tma));
    assert!(!Target::Sm80.has(Feature::Clusters) && Target::Sm90a.has(Feature::Clusters));
}

#[test]
fn known_names_list_every_target_lowest_first() {
    // The frontend's messages ("the known targets are ...") and the trybuild
    // `.stderr` files that pin them.
    assert_eq!(Target::known_names(), "`sm_80` and `sm_90a`");
}

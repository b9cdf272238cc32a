//! PTX printing of the Hopper Thread IR instructions: every form assembles
//! with ptxas for sm_90a (`TILE_PTXAS`), the module version follows the
//! instructions used, and sm_80 modules reject sm_90 instructions.

mod ptxas;

use tile_ir::thread_ir::*;
use tile_ir::Target;

struct Builder {
    f: Function,
}

impl Builder {
    fn new(threads: u32) -> Builder {
        let f = Function {
            name: "hopper_forms".into(),
            params: vec![("tmap".into(), TENSOR_MAP_PARAM), ("out".into(), ".u64")],
            threads,
            shared_bytes: 4096,
            ..Function::default()
        };
        Builder { f }
    }
    fn reg(&mut self, c: RegClass) -> Reg {
        self.f.new_reg(c)
    }
    fn push(&mut self, inst: Inst) {
        self.f.body.push(Stmt::Inst { inst, guard: None });
    }
}

fn smem(offset: i64) -> Address {
    Address { base: Operand::Symbol(SMEM.into()), offset }
}

/// A function using every Hopper instruction form once (not meant to run).
fn all_forms(n: u32, cta_dst: bool) -> Function {
    let mut b = Builder::new(128);
    let tmap = b.reg(RegClass::B64);
    b.push(Inst::TensorMapAddr { dst: tmap, param: "tmap".into() });
    let bar = b.reg(RegClass::B32);
    b.push(Inst::Op { op: "mov.u32".into(), dst: bar, args: vec![Operand::Symbol(SMEM.into())] });
    let bar_addr = Address { base: Operand::Reg(bar), offset: 8 };
    let leader = b.reg(RegClass::Pred);
    b.push(Inst::ElectSync { pred: leader });
    b.f.body.push(Stmt::Inst {
        inst: Inst::MbarInit { addr: bar_addr.clone(), count: Operand::Imm(1) },
        guard: Some((leader, false)),
    });
    b.push(Inst::FenceMbarrierInit);
    b.push(Inst::MbarArrive { addr: smem(16) });
    let c0 = b.reg(RegClass::B32);
    b.push(Inst::Op { op: "mov.u32".into(), dst: c0, args: vec![Operand::Special(Special::TidX)] });
    let hint = b.reg(RegClass::B64);
    b.push(Inst::Op {
        op: "createpolicy.fractional.L2::evict_first.b64".into(),
        dst: hint,
        args: vec![Operand::F32(1.0)],
    });
    let then = vec![
        Stmt::Inst {
            inst: Inst::MbarArriveExpectTx { addr: bar_addr.clone(), tx_bytes: Operand::Imm(2048) },
            guard: None,
        },
        Stmt::Inst {
            inst: Inst::TmaLoad {
                dst: smem(1024),
                tmap: Operand::Reg(tmap),
                coords: vec![Operand::Reg(c0), Operand::Imm(64)],
                mbar: bar_addr.clone(),
                cache_hint: None,
                cta_dst,
                multicast: None,
                region: Some(Region { id: 0, op: 1 }),
            },
            guard: None,
        },
    ];
    b.f.body.push(Stmt::If { cond: leader, negate: false, uniform: false, then, otherwise: vec![] });
    for rank in 3..=5 {
        b.push(Inst::TmaLoad {
            dst: smem(2048),
            tmap: Operand::Reg(tmap),
            coords: (0..rank).map(|i| if i == 0 { Operand::Reg(c0) } else { Operand::Imm(i) }).collect(),
            mbar: bar_addr.clone(),
            cache_hint: Some(Operand::Reg(hint)),
            cta_dst: false,
            multicast: None,
            region: None,
        });
    }
    // Thread block cluster forms: the rank, a remote barrier address, a
    // remote arrival, the cluster barrier, a multicast box (with and
    // without a cache hint).
    let rank = b.reg(RegClass::B32);
    b.push(Inst::Op { op: "mov.u32".into(), dst: rank, args: vec![Operand::Special(Special::ClusterCtaRank)] });
    let remote = b.reg(RegClass::B32);
    b.push(Inst::Op {
        op: "mapa.shared::cluster.u32".into(),
        dst: remote,
        args: vec![Operand::Reg(bar), Operand::Reg(rank)],
    });
    b.push(Inst::MbarArriveCluster { addr: Operand::Reg(remote) });
    b.push(Inst::ClusterArrive);
    b.push(Inst::ClusterWait);
    let mask = b.reg(RegClass::B16);
    b.push(Inst::Op { op: "mov.b16".into(), dst: mask, args: vec![Operand::Imm(3)] });
    for cache_hint in [None, Some(Operand::Reg(hint))] {
        b.push(Inst::TmaLoad {
            dst: smem(1024),
            tmap: Operand::Reg(tmap),
            coords: vec![Operand::Reg(c0), Operand::Imm(32)],
            mbar: bar_addr.clone(),
            cache_hint,
            cta_dst: false,
            multicast: Some(Operand::Reg(mask)),
            region: None,
        });
    }
    let wait_pred = b.reg(RegClass::Pred);
    b.push(Inst::MbarWait { addr: bar_addr.clone(), parity: Operand::Imm(0), pred: wait_pred });
    let parity = b.reg(RegClass::B32);
    b.push(Inst::Op { op: "and.b32".into(), dst: parity, args: vec![Operand::Reg(c0), Operand::Imm(1)] });
    // A guarded wait (the printer wraps the loop in a skip branch).
    b.f.body.push(Stmt::Inst {
        inst: Inst::MbarWait { addr: bar_addr.clone(), parity: Operand::Reg(parity), pred: wait_pred },
        guard: Some((leader, true)),
    });
    b.push(Inst::FenceProxyAsync);
    b.push(Inst::SetMaxNreg { inc: false, count: 40 });
    b.push(Inst::SetMaxNreg { inc: true, count: 232 });
    // wgmma: descriptors in 64-bit registers, accumulator of n/2 floats.
    let da = b.reg(RegClass::B64);
    let db = b.reg(RegClass::B64);
    b.push(Inst::Op { op: "mov.b64".into(), dst: da, args: vec![Operand::Imm(0x4000_0040_0001_0040)] });
    b.push(Inst::Op { op: "mov.b64".into(), dst: db, args: vec![Operand::Imm(0x4000_0040_0001_0080)] });
    let d: Vec<Reg> = (0..n / 2).map(|_| b.reg(RegClass::F32)).collect();
    for r in &d {
        b.push(Inst::Op { op: "mov.f32".into(), dst: *r, args: vec![Operand::F32(0.0)] });
    }
    let a: Vec<Reg> = (0..4).map(|_| b.reg(RegClass::B32)).collect();
    for r in &a {
        b.push(Inst::Op { op: "mov.b32".into(), dst: *r, args: vec![Operand::Imm(0x3C00_3C00)] });
    }
    let scale_d = b.reg(RegClass::Pred);
    b.push(Inst::Op { op: "setp.ne.u32".into(), dst: scale_d, args: vec![Operand::Reg(c0), Operand::Imm(0)] });
    b.push(Inst::WgmmaFence);
    for (ab, a_op, trans_a, neg_a, sd) in [
        ("f16", WgmmaA::Desc(Operand::Reg(da)), false, false, Operand::Imm(0)),
        ("bf16", WgmmaA::Desc(Operand::Reg(da)), true, true, Operand::Reg(scale_d)),
        ("f16", WgmmaA::Regs([a[0], a[1], a[2], a[3]]), false, false, Operand::Reg(scale_d)),
        ("bf16", WgmmaA::Regs([a[0], a[1], a[2], a[3]]), false, true, Operand::Imm(1)),
    ] {
        b.push(Inst::Wgmma {
            n,
            ab,
            d: d.clone(),
            a: a_op,
            b_desc: Operand::Reg(db),
            scale_d: sd,
            neg_a,
            neg_b: !neg_a,
            trans_a,
            trans_b: trans_a,
            regions: vec![],
        });
    }
    b.push(Inst::WgmmaCommit);
    b.push(Inst::WgmmaWait { pending: 0 });
    // Accumulator → shared → TMA store.
    b.push(Inst::St {
        space: Space::Shared,
        ty: "f32",
        srcs: vec![Operand::Reg(d[0])],
        addr: smem(3072),
        region: None,
    });
    b.push(Inst::FenceProxyAsync);
    b.push(Inst::BarSync);
    for rank in 1..=5 {
        b.push(Inst::TmaStore {
            tmap: Operand::Reg(tmap),
            coords: (0..rank).map(|i| if i == 0 { Operand::Reg(c0) } else { Operand::Imm(0) }).collect(),
            src: smem(1024),
            region: None,
        });
    }
    b.push(Inst::BulkCommit);
    b.push(Inst::BulkWaitRead { pending: 0 });
    b.f
}

#[test]
fn every_form_assembles_for_sm90a() {
    for n in [8, 64, 256] {
        let f = all_forms(n, false);
        let ptx = tile_ir::ptx::try_emit(&f, Target::Sm90a).unwrap();
        assert!(ptx.contains(".version 8.0\n"), "{ptx}");
        assert!(ptx.contains(".param .align 64 .b8 tmap[128],"), "{ptx}");
        assert!(ptx.contains("mbarrier.try_wait.parity.shared::cta.b64"));
        assert!(ptx.contains(&format!("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16")));
        assert!(ptx.contains(
            "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
        ));
        assert!(ptx.contains("cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group"));
        if let Some(report) = ptxas::assemble(&format!("hopper_forms_n{n}"), &ptx, "sm_90a") {
            assert!(!report.contains("error"), "{report}");
        }
    }
}

#[test]
fn the_cta_destination_raises_the_version_to_8_6() {
    let f = all_forms(16, true);
    assert_eq!(tile_ir::ptx::ptx_version(&f, Target::Sm90a), 86);
    let ptx = tile_ir::ptx::try_emit(&f, Target::Sm90a).unwrap();
    assert!(ptx.contains(".version 8.6\n"));
    assert!(ptx.contains("cp.async.bulk.tensor.2d.shared::cta.global.tile"));
    ptxas::assemble("hopper_forms_cta", &ptx, "sm_90a");
}

#[test]
fn sm80_rejects_sm90_instructions_with_a_message() {
    let f = all_forms(8, false);
    let err = tile_ir::ptx::try_emit(&f, Target::Sm80).unwrap_err();
    assert!(err.message.contains("needs sm_90"), "{}", err.message);
    assert!(err.message.contains("elect.sync"), "{}", err.message);
    // One instruction at a time, each named.
    for inst in [
        Inst::WgmmaFence,
        Inst::FenceProxyAsync,
        Inst::SetMaxNreg { inc: true, count: 240 },
        Inst::BulkWaitRead { pending: 1 },
        Inst::MbarArriveExpectTx { addr: smem(0), tx_bytes: Operand::Imm(16) },
    ] {
        let mut b = Builder::new(128);
        let op = inst.opcode();
        b.push(inst);
        let err = tile_ir::ptx::try_emit(&b.f, Target::Sm80).unwrap_err();
        assert!(err.message.contains(&op), "{} lacks {op}", err.message);
    }
    // mbarrier.init and a plain arrive exist on sm_80.
    let mut b = Builder::new(32);
    b.f.params.truncate(1);
    b.f.params[0] = ("out".into(), ".u64");
    b.push(Inst::MbarInit { addr: smem(0), count: Operand::Imm(32) });
    b.push(Inst::MbarArrive { addr: smem(0) });
    let ptx = tile_ir::ptx::try_emit(&b.f, Target::Sm80).unwrap();
    assert!(ptx.contains(".version 8.0\n"));
    ptxas::assemble("mbarrier_sm80", &ptx, "sm_80");
}

#[test]
fn modules_without_hopper_instructions_keep_version_8_0() {
    let mut b = Builder::new(32);
    b.f.params = vec![("out".into(), ".u64")];
    b.push(Inst::BarSync);
    assert_eq!(tile_ir::ptx::ptx_version(&b.f, Target::Sm80), 80);
    let thread_ir = print_function(&all_forms(8, false));
    assert!(thread_ir.contains("(loop)"));
    assert!(thread_ir.contains("// region 0.1"));
}

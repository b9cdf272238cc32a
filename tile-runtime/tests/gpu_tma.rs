//! Tensor maps on the GPU (feature `gpu`, compute capability 9.0+):
//! `cuTensorMapEncodeTiled` accepts what `TensorMapSpec` validates, and a
//! hand-built Thread IR kernel (TMA load with 128B swizzle and zero fill,
//! mbarrier wait, four wgmma k-steps from descriptors of
//! `tile_ir::hopper::operand_descriptor`) matches the semantics the Thread IR
//! simulator implements: the raw shared bytes equal `layout.rs`'s swizzled
//! layout and the accumulator equals A·B at the PTX placement.
#![cfg(feature = "gpu")]

use std::ffi::{c_void, CString};
use tile_ir::hopper::{self, Major};
use tile_ir::layout::SharedLayout;
use tile_ir::thread_ir::*;
use tile_ir::{DType, Target};
use tile_runtime::cudarc::driver::{result, sys};
use tile_runtime::{f16, Device, DeviceTensor, TensorMap, TensorMapSpec, TmaSwizzle};
use tile_testkit::Rng;

fn hopper_gpu() -> Option<(Device, tile_runtime::Stream)> {
    let device = Device::cuda(0).expect("these tests need a GPU");
    if device.compute_capability().unwrap().0 < 9 {
        eprintln!("skipping: TMA needs compute capability 9.0+, this GPU is {:?}", device.compute_capability());
        return None;
    }
    let stream = device.stream().unwrap();
    Some((device, stream))
}

#[test]
fn encode_a_2d_f16_map() {
    let Some((device, stream)) = hopper_gpu() else { return };
    let t = DeviceTensor::<f16>::zeros(&stream, &[1000, 2000]).unwrap();
    let spec =
        TensorMapSpec::row_major(DType::F16, t.device_ptr().unwrap(), &[1000, 2000], &[64, 64], TmaSwizzle::B128);
    let map = TensorMap::encode(&device, &spec).unwrap();
    assert!(map.as_bytes().iter().any(|&b| b != 0));
    // A 3-D bf16 map with a 64B swizzle and a partial box.
    let t3 = DeviceTensor::<tile_runtime::bf16>::zeros(&stream, &[3, 40, 96]).unwrap();
    let spec =
        TensorMapSpec::row_major(DType::BF16, t3.device_ptr().unwrap(), &[3, 40, 96], &[1, 16, 32], TmaSwizzle::B64);
    TensorMap::encode(&device, &spec).unwrap();
    // Validation runs before the driver.
    let bad =
        TensorMapSpec::row_major(DType::F16, t.device_ptr().unwrap() + 2, &[1000, 2000], &[64, 64], TmaSwizzle::B128);
    assert!(TensorMap::encode(&device, &bad).unwrap_err().to_string().contains("16-byte aligned"));
}

fn smem(offset: i64) -> Address {
    Address { base: Operand::Symbol(SMEM.into()), offset }
}

/// TMA A (64×64 box of a [rows_a, 57] matrix) and B (a 64×64 box: Bᵀ,
/// K-major, or with `b_n_major` B itself, [K, N] row-major) into
/// 128B-swizzled shared tiles, then D = A·B with 4 wgmma m64n64k16 steps;
/// writes D, A's raw shared bytes and the shared base.
pub fn kernel(b_n_major: bool) -> Function {
    let mut f = Function {
        name: "tma_wgmma".into(),
        params: vec![
            ("ta".into(), TENSOR_MAP_PARAM),
            ("tb".into(), TENSOR_MAP_PARAM),
            ("out_d".into(), ".u64"),
            ("out_raw".into(), ".u64"),
            ("out_base".into(), ".u64"),
        ],
        threads: 128,
        shared_bytes: 16384 + 64,
        ..Function::default()
    };
    let mut body = vec![];
    let reg = |f: &mut Function, c| f.new_reg(c);
    let op = |op: &str, dst: Reg, args: Vec<Operand>| Stmt::Inst {
        inst: Inst::Op { op: op.into(), dst, args },
        guard: None,
    };
    let inst = |i: Inst| Stmt::Inst { inst: i, guard: None };
    let tid = reg(&mut f, RegClass::B32);
    let leader = reg(&mut f, RegClass::Pred);
    let (ta, tb) = (reg(&mut f, RegClass::B64), reg(&mut f, RegClass::B64));
    let sbase = reg(&mut f, RegClass::B32);
    body.push(op("mov.u32", tid, vec![Operand::Special(Special::TidX)]));
    body.push(op("setp.eq.u32", leader, vec![Operand::Reg(tid), Operand::Imm(0)]));
    body.push(inst(Inst::TensorMapAddr { dst: ta, param: "ta".into() }));
    body.push(inst(Inst::TensorMapAddr { dst: tb, param: "tb".into() }));
    body.push(op("mov.u32", sbase, vec![Operand::Symbol(SMEM.into())]));
    let bar = smem(16384);
    let then = vec![inst(Inst::MbarInit { addr: bar.clone(), count: Operand::Imm(1) }), inst(Inst::FenceMbarrierInit)];
    body.push(Stmt::If { cond: leader, negate: false, uniform: false, then, otherwise: vec![] });
    body.push(inst(Inst::BarSync));
    let load = |dst: i64, tmap: Reg| {
        inst(Inst::TmaLoad {
            dst: smem(dst),
            tmap: Operand::Reg(tmap),
            coords: vec![Operand::Imm(0), Operand::Imm(0)],
            mbar: smem(16384),
            cache_hint: None,
            cta_dst: false,
            multicast: None,
            region: None,
        })
    };
    let then = vec![
        inst(Inst::MbarArriveExpectTx { addr: bar.clone(), tx_bytes: Operand::Imm(16384) }),
        load(0, ta),
        load(8192, tb),
    ];
    body.push(Stmt::If { cond: leader, negate: false, uniform: false, then, otherwise: vec![] });
    let p = reg(&mut f, RegClass::Pred);
    body.push(inst(Inst::MbarWait { addr: bar, parity: Operand::Imm(0), pred: p }));
    // Descriptors: start addresses relative to `smem`, plus its runtime address.
    let base16 = reg(&mut f, RegClass::B64);
    body.push(op("cvt.u64.u32", base16, vec![Operand::Reg(sbase)]));
    body.push(op("shr.u64", base16, vec![Operand::Reg(base16), Operand::Imm(4)]));
    let d: Vec<Reg> = (0..32).map(|_| reg(&mut f, RegClass::F32)).collect();
    let (ad, bd) = (reg(&mut f, RegClass::B64), reg(&mut f, RegClass::B64));
    let layout = SharedLayout::for_ldmatrix(64, 64, 2);
    body.push(inst(Inst::WgmmaFence));
    for s in 0..4 {
        let a_desc = hopper::operand_descriptor(&layout, Major::K, 0, 0, 16 * s).unwrap().encode().unwrap();
        let b_desc = if b_n_major {
            hopper::operand_descriptor(&layout, Major::MN, 8192, 16 * s, 0)
        } else {
            hopper::operand_descriptor(&layout, Major::K, 8192, 0, 16 * s)
        };
        let b_desc = b_desc.unwrap().encode().unwrap();
        body.push(op("add.s64", ad, vec![Operand::Imm(a_desc as i64), Operand::Reg(base16)]));
        body.push(op("add.s64", bd, vec![Operand::Imm(b_desc as i64), Operand::Reg(base16)]));
        body.push(inst(Inst::Wgmma {
            n: 64,
            ab: "f16",
            d: d.clone(),
            a: WgmmaA::Desc(Operand::Reg(ad)),
            b_desc: Operand::Reg(bd),
            scale_d: Operand::Imm((s > 0) as i64),
            neg_a: false,
            neg_b: false,
            trans_a: false,
            trans_b: b_n_major,
            regions: vec![],
        }));
    }
    body.push(inst(Inst::WgmmaCommit));
    body.push(inst(Inst::WgmmaWait { pending: 0 }));
    // Global addresses: param + tid · bytes.
    let gaddr = |f: &mut Function, body: &mut Vec<Stmt>, name: &str, scale: i64| {
        let b = f.new_reg(RegClass::B64);
        body.push(inst(Inst::LdParam { ty: "u64", dst: b, name: name.into() }));
        let o = f.new_reg(RegClass::B64);
        body.push(op("mul.wide.u32", o, vec![Operand::Reg(tid), Operand::Imm(scale)]));
        body.push(op("add.s64", b, vec![Operand::Reg(b), Operand::Reg(o)]));
        b
    };
    let gd = gaddr(&mut f, &mut body, "out_d", 128);
    for (j, c) in d.chunks(4).enumerate() {
        let srcs = c.iter().map(|r| Operand::Reg(*r)).collect();
        body.push(inst(Inst::St {
            space: Space::Global,
            ty: "f32",
            srcs,
            addr: Address { base: Operand::Reg(gd), offset: 16 * j as i64 },
            region: None,
        }));
    }
    let graw = gaddr(&mut f, &mut body, "out_raw", 64);
    let so = reg(&mut f, RegClass::B32);
    body.push(op("mad.lo.u32", so, vec![Operand::Reg(tid), Operand::Imm(64), Operand::Reg(sbase)]));
    let v: Vec<Reg> = (0..4).map(|_| reg(&mut f, RegClass::B32)).collect();
    for j in 0..4 {
        body.push(inst(Inst::Ld {
            space: Space::Shared,
            ty: "b32",
            dsts: v.clone(),
            addr: Address { base: Operand::Reg(so), offset: 16 * j },
            region: None,
        }));
        let srcs = v.iter().map(|r| Operand::Reg(*r)).collect();
        body.push(inst(Inst::St {
            space: Space::Global,
            ty: "b32",
            srcs,
            addr: Address { base: Operand::Reg(graw), offset: 16 * j },
            region: None,
        }));
    }
    let gb = f.new_reg(RegClass::B64);
    body.push(inst(Inst::LdParam { ty: "u64", dst: gb, name: "out_base".into() }));
    body.push(Stmt::Inst {
        inst: Inst::St {
            space: Space::Global,
            ty: "u32",
            srcs: vec![Operand::Reg(sbase)],
            addr: Address { base: Operand::Reg(gb), offset: 0 },
            region: None,
        },
        guard: Some((leader, false)),
    });
    f.body = body;
    f
}

#[test]
fn tma_and_wgmma_match_the_simulated_semantics() {
    tma_wgmma_case(false);
}

#[test]
fn tma_and_wgmma_with_an_n_major_b_match_the_simulated_semantics() {
    tma_wgmma_case(true);
}

fn tma_wgmma_case(b_n_major: bool) {
    let Some((device, stream)) = hopper_gpu() else { return };
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    // A: [61, 57] in a 64-column pitch; Bᵀ (or B): [61, 50] in a 56-column pitch.
    let (ra, ca, pa) = (61usize, 57usize, 64usize);
    let (rb, cb, pb) = (61usize, 50usize, 56usize);
    let a: Vec<f16> = (0..ra * pa).map(|_| f16::from_f32(rng.f32(-1.0, 1.0))).collect();
    let b: Vec<f16> = (0..rb * pb).map(|_| f16::from_f32(rng.f32(-1.0, 1.0))).collect();
    let ga = DeviceTensor::from_slice(&stream, &a, &[ra, pa]).unwrap();
    let gb = DeviceTensor::from_slice(&stream, &b, &[rb, pb]).unwrap();
    let map = |t: &DeviceTensor<f16>, rows: usize, cols: usize, pitch: usize| {
        let spec = TensorMapSpec {
            dims: vec![cols as u64, rows as u64],
            strides: vec![2 * pitch as u64],
            ..TensorMapSpec::row_major(
                DType::F16,
                t.device_ptr().unwrap(),
                &[rows as u64, cols as u64],
                &[64, 64],
                TmaSwizzle::B128,
            )
        };
        TensorMap::encode(&device, &spec).unwrap()
    };
    let (ma, mb) = (map(&ga, ra, ca, pa), map(&gb, rb, cb, pb));
    let out_d = DeviceTensor::<f32>::zeros(&stream, &[128 * 32]).unwrap();
    let out_raw = DeviceTensor::<u32>::zeros(&stream, &[2048]).unwrap();
    let out_base = DeviceTensor::<u32>::zeros(&stream, &[1]).unwrap();
    let f = kernel(b_n_major);
    let ptx = tile_ir::ptx::try_emit(&f, Target::Sm90a).unwrap();
    let ctx = device.cuda_context().unwrap();
    ctx.bind_to_thread().unwrap();
    let src = CString::new(ptx.clone()).unwrap();
    // SAFETY: NUL-terminated PTX; the context is current.
    let module =
        unsafe { result::module::load_data(src.as_ptr() as *const c_void) }.unwrap_or_else(|e| panic!("{e:?}\n{ptx}"));
    let func = unsafe { result::module::get_function(module, CString::new("tma_wgmma").unwrap()) }.unwrap();
    let (mut pd, mut pr, mut pbase) =
        (out_d.device_ptr().unwrap(), out_raw.device_ptr().unwrap(), out_base.device_ptr().unwrap());
    let mut params: Vec<*mut c_void> = vec![
        ma.param_ptr(),
        mb.param_ptr(),
        &mut pd as *mut u64 as *mut c_void,
        &mut pr as *mut u64 as *mut c_void,
        &mut pbase as *mut u64 as *mut c_void,
    ];
    let cu_stream: sys::CUstream = stream.cuda_stream().unwrap().cu_stream();
    // SAFETY: the parameters match the kernel's (two 128-byte maps, three pointers).
    unsafe { result::launch_kernel(func, (1, 1, 1), (128, 1, 1), f.shared_bytes, cu_stream, &mut params) }.unwrap();
    stream.synchronize().unwrap();
    let base = out_base.to_vec(&stream).unwrap()[0];
    eprintln!("dynamic shared memory starts at shared address {base:#x}");
    let raw: Vec<u8> = out_raw.to_vec(&stream).unwrap().iter().flat_map(|w| w.to_le_bytes()).collect();
    let l = SharedLayout::for_ldmatrix(64, 64, 2);
    let get = |m: &[f16], r: usize, c: usize, rows: usize, cols: usize, pitch: usize| {
        if r < rows && c < cols {
            m[r * pitch + c]
        } else {
            f16::from_f32(0.0)
        }
    };
    for r in 0..64 {
        for c in 0..64 {
            let o = l.offset(r as i64, c as i64) as usize;
            let got = f16::from_bits(u16::from_le_bytes([raw[o], raw[o + 1]]));
            assert_eq!(got.to_bits(), get(&a, r, c, ra, ca, pa).to_bits(), "A shared ({r}, {c}), smem base {base:#x}");
        }
    }
    let dv = out_d.to_vec(&stream).unwrap();
    for t in 0..128i64 {
        for i in 0..32i64 {
            let (r, c) = hopper::wgmma_d_coord(t, i);
            let want: f64 = (0..64)
                .map(|k| {
                    let bv =
                        if b_n_major { get(&b, k, c as usize, rb, cb, pb) } else { get(&b, c as usize, k, rb, cb, pb) };
                    get(&a, r as usize, k, ra, ca, pa).to_f64() * bv.to_f64()
                })
                .sum();
            let got = dv[(t * 32 + i) as usize] as f64;
            assert!(
                (got - want).abs() < 1e-3 * (1.0 + want.abs()),
                "D[{r}][{c}] = {got}, want {want} (thread {t} reg {i})"
            );
        }
    }
    // SAFETY: no launch uses the module any more.
    unsafe { result::module::unload(module) }.unwrap();
}

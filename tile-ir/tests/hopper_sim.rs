//! The simulator's Hopper semantics against independent references: mbarrier
//! phases, TMA loads (box, 128B swizzle as `layout.rs` builds it, out-of-bounds
//! zero fill) and stores, and wgmma with descriptors from `tile_ir::hopper`
//! (K-major and MN-major, register A), on random data of awkward sizes.

mod sim;

use half::{bf16, f16};
use sim::{Sim, SimTensorMap, GBASE};
use std::collections::HashMap;
use tile_ir::hopper::{self, Major};
use tile_ir::layout::SharedLayout;
use tile_ir::thread_ir::*;
use tile_testkit::Rng;

/// A Thread IR function under construction, with the usual prologue:
/// `tid`, `leader` (tid == 0), the tensor-map address of `tmap`.
struct K {
    f: Function,
    tid: Reg,
    leader: Reg,
    tmap: Reg,
}

fn smem(offset: i64) -> Address {
    Address { base: Operand::Symbol(SMEM.into()), offset }
}
fn at(r: Reg, offset: i64) -> Address {
    Address { base: Operand::Reg(r), offset }
}

impl K {
    fn new(threads: u32, shared_bytes: u32, params: &[(&str, &'static str)]) -> K {
        let mut f = Function {
            name: "k".into(),
            params: params.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
            threads,
            shared_bytes,
            ..Function::default()
        };
        let tid = f.new_reg(RegClass::B32);
        let leader = f.new_reg(RegClass::Pred);
        let tmap = f.new_reg(RegClass::B64);
        let mut k = K { f, tid, leader, tmap };
        k.op("mov.u32", tid, vec![Operand::Special(Special::TidX)]);
        k.op("setp.eq.u32", leader, vec![Operand::Reg(tid), Operand::Imm(0)]);
        if params.iter().any(|(_, t)| *t == TENSOR_MAP_PARAM) {
            let name = params.iter().find(|(_, t)| *t == TENSOR_MAP_PARAM).unwrap().0;
            k.push(Inst::TensorMapAddr { dst: tmap, param: name.into() });
        }
        k
    }
    fn reg(&mut self, c: RegClass) -> Reg {
        self.f.new_reg(c)
    }
    fn push(&mut self, inst: Inst) {
        self.f.body.push(Stmt::Inst { inst, guard: None });
    }
    fn op(&mut self, op: &str, dst: Reg, args: Vec<Operand>) {
        self.push(Inst::Op { op: op.into(), dst, args });
    }
    fn if_leader(&mut self, body: Vec<Inst>) {
        let then = body.into_iter().map(|inst| Stmt::Inst { inst, guard: None }).collect();
        self.f.body.push(Stmt::If { cond: self.leader, negate: false, uniform: false, then, otherwise: vec![] });
    }
    /// A 64-bit global address: param `name` + `tid · scale` + `offset`.
    fn global_addr(&mut self, name: &str, scale: i64) -> Reg {
        let base = self.reg(RegClass::B64);
        self.push(Inst::LdParam { ty: "u64", dst: base, name: name.into() });
        let off32 = self.reg(RegClass::B32);
        self.op("mul.lo.u32", off32, vec![Operand::Reg(self.tid), Operand::Imm(scale)]);
        let off = self.reg(RegClass::B64);
        self.op("cvt.u64.u32", off, vec![Operand::Reg(off32)]);
        let a = self.reg(RegClass::B64);
        self.op("add.s64", a, vec![Operand::Reg(base), Operand::Reg(off)]);
        a
    }
    /// Each thread copies bytes `[16t, 16t+16)` (+ 2048·j) of shared
    /// `[from, from+len)` to global param `out` at the same offset.
    fn copy_shared_out(&mut self, from: i64, len: i64) {
        let g = self.global_addr("out", 16);
        let s = self.reg(RegClass::B32);
        self.op("mul.lo.u32", s, vec![Operand::Reg(self.tid), Operand::Imm(16)]);
        let v: Vec<Reg> = (0..4).map(|_| self.reg(RegClass::B32)).collect();
        let step = 16 * self.f.threads as i64;
        for j in 0..len / step {
            self.push(Inst::Ld {
                space: Space::Shared,
                ty: "b32",
                dsts: v.clone(),
                addr: at(s, from + j * step),
                region: None,
            });
            let srcs = v.iter().map(|r| Operand::Reg(*r)).collect();
            self.push(Inst::St { space: Space::Global, ty: "b32", srcs, addr: at(g, j * step), region: None });
        }
    }
}

fn params(out: usize) -> HashMap<String, u64> {
    let mut p = HashMap::new();
    p.insert("out".to_string(), GBASE + ((out as u64) << 32));
    p
}

fn h16(v: &[f32], bf: bool) -> Vec<u8> {
    v.iter()
        .flat_map(|x| if bf { bf16::from_f32(*x).to_bits() } else { f16::from_f32(*x).to_bits() }.to_le_bytes())
        .collect()
}
fn rounded(x: f32, bf: bool) -> f64 {
    if bf {
        bf16::from_f32(x).to_f64()
    } else {
        f16::from_f32(x).to_f64()
    }
}

// ---------------------------------------------------------------- mbarrier

fn mbar_kernel(threads: u32, arrive_all: bool, wait_parity: i64) -> Function {
    let mut k = K::new(threads, 256, &[("out", ".u64")]);
    k.if_leader(vec![
        Inst::MbarInit { addr: smem(0), count: Operand::Imm(threads as i64) },
        Inst::MbarInit { addr: smem(8), count: Operand::Imm(1) },
        Inst::FenceMbarrierInit,
    ]);
    k.push(Inst::BarSync);
    if arrive_all {
        k.push(Inst::MbarArrive { addr: smem(0) });
    } else {
        k.if_leader(vec![Inst::MbarArrive { addr: smem(0) }]);
    }
    let p = k.reg(RegClass::Pred);
    k.push(Inst::MbarWait { addr: smem(0), parity: Operand::Imm(wait_parity), pred: p });
    // A second phase on barrier 0, and a count-1 barrier used twice.
    if arrive_all {
        k.push(Inst::MbarArrive { addr: smem(0) });
        k.push(Inst::MbarWait { addr: smem(0), parity: Operand::Imm(1), pred: p });
    }
    k.if_leader(vec![Inst::MbarArrive { addr: smem(8) }]);
    k.push(Inst::MbarWait { addr: smem(8), parity: Operand::Imm(0), pred: p });
    // Every warp has seen phase 0 before the leader completes phase 1 (else
    // a warp that has not waited yet would see parity 0 again, pending).
    k.push(Inst::BarSync);
    k.if_leader(vec![Inst::MbarArrive { addr: smem(8) }]);
    k.push(Inst::MbarWait { addr: smem(8), parity: Operand::Imm(1), pred: p });
    k.f
}

#[test]
fn mbarrier_phases_complete_after_every_arrival() {
    let f = mbar_kernel(96, true, 0);
    let mut s = Sim::new(&f, vec![vec![0; 16]], params(0));
    s.run_block();
    let m = s.mbarrier(0).unwrap();
    // Two completed phases, arrivals reset to the count, no bytes.
    assert_eq!((m.phase, m.pending, m.tx, m.expected), (2, 96, 0, 96));
    assert_eq!(s.mbarrier(8).unwrap().phase, 2);
}

#[test]
#[should_panic(expected = "waits forever")]
fn mbarrier_wait_before_all_arrivals_deadlocks() {
    let f = mbar_kernel(64, false, 0);
    Sim::new(&f, vec![vec![0; 16]], params(0)).run_block();
}

#[test]
fn mbarrier_wait_on_the_previous_parity_returns_at_once() {
    // Parity 1 names the phase before phase 0: already "complete".
    let f = mbar_kernel(64, false, 1);
    let mut s = Sim::new(&f, vec![vec![0; 16]], params(0));
    s.run_block();
    let m = s.mbarrier(0).unwrap();
    assert_eq!((m.phase, m.pending), (0, 63));
}

#[test]
#[should_panic(expected = "no bar.sync in between")]
fn mbarrier_use_before_the_barrier_after_init_fails() {
    let mut k = K::new(64, 64, &[("out", ".u64")]);
    k.if_leader(vec![Inst::MbarInit { addr: smem(0), count: Operand::Imm(64) }]);
    k.push(Inst::MbarArrive { addr: smem(0) });
    Sim::new(&k.f, vec![vec![0; 16]], params(0)).run_block();
}

// ---------------------------------------------------------------- TMA

/// An f16 matrix [rows, cols] with row pitch `pitch` elements.
struct Mat {
    rows: usize,
    cols: usize,
    pitch: usize,
    vals: Vec<f32>,
}

impl Mat {
    fn random(rows: usize, cols: usize, rng: &mut Rng) -> Mat {
        let pitch = cols.div_ceil(8) * 8 + 8;
        Mat { rows, cols, pitch, vals: (0..rows * pitch).map(|_| rng.f32(-1.0, 1.0)).collect() }
    }
    fn get(&self, r: i64, c: i64) -> f32 {
        if r < 0 || c < 0 || r >= self.rows as i64 || c >= self.cols as i64 {
            0.0
        } else {
            self.vals[r as usize * self.pitch + c as usize]
        }
    }
    fn map(&self, tensor: usize, boxdim: [u32; 2], swizzle: u32) -> SimTensorMap {
        SimTensorMap {
            tensor,
            elem_bytes: 2,
            dims: vec![self.cols as u64, self.rows as u64],
            strides: vec![2 * self.pitch as u64],
            boxdim: boxdim.to_vec(),
            swizzle,
        }
    }
}

/// TMA loads of two 16×64 boxes at `coords` (one per box) into shared
/// 1024 and 3072, one mbarrier expecting both, then a copy of the 4 KB out.
fn tma_load_kernel(coords: [[i64; 2]; 2], expect: i64) -> Function {
    let mut k = K::new(128, 8192, &[("tmap", TENSOR_MAP_PARAM), ("out", ".u64")]);
    k.if_leader(vec![Inst::MbarInit { addr: smem(0), count: Operand::Imm(1) }, Inst::FenceMbarrierInit]);
    k.push(Inst::BarSync);
    let mut issue = vec![Inst::MbarArriveExpectTx { addr: smem(0), tx_bytes: Operand::Imm(expect) }];
    for (i, c) in coords.iter().enumerate() {
        issue.push(Inst::TmaLoad {
            dst: smem(1024 + 2048 * i as i64),
            tmap: Operand::Reg(k.tmap),
            coords: vec![Operand::Imm(c[0]), Operand::Imm(c[1])],
            mbar: smem(0),
            cache_hint: None,
            cta_dst: false,
            multicast: None,
            region: None,
        });
    }
    k.if_leader(issue);
    let p = k.reg(RegClass::Pred);
    k.push(Inst::MbarWait { addr: smem(0), parity: Operand::Imm(0), pred: p });
    k.copy_shared_out(1024, 4096);
    k.f
}

#[test]
fn tma_load_places_a_swizzled_box_with_zero_fill() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let x = Mat::random(37, 100, &mut rng);
    let coords = [[64, 30], [-8, -3]];
    let f = tma_load_kernel(coords, 4096);
    let mut s = Sim::new(&f, vec![h16(&x.vals, false), vec![0; 4096]], params(1));
    s.add_tensor_map("tmap", x.map(0, [64, 16], 128));
    s.run_block();
    assert_eq!(s.hopper.tma_loads, 2);
    // Reference: layout.rs's 128B-swizzled [16, 64] f16 tile.
    let l = SharedLayout::for_ldmatrix(16, 64, 2);
    let out = &s.tensors[1];
    for (b, c) in coords.iter().enumerate() {
        for i1 in 0..16 {
            for i0 in 0..64 {
                let off = 2048 * b + l.offset(i1, i0) as usize;
                let got = f16::from_bits(u16::from_le_bytes([out[off], out[off + 1]])).to_f32();
                let want = f16::from_f32(x.get(c[1] + i1, c[0] + i0)).to_f32();
                assert_eq!(got, want, "box {b} ({i1}, {i0})");
            }
        }
    }
    // A box entirely inside, unswizzled, is the plain row-major copy.
    let f = tma_load_kernel([[8, 4], [24, 20]], 4096);
    let mut s = Sim::new(&f, vec![h16(&x.vals, false), vec![0; 4096]], params(1));
    s.add_tensor_map("tmap", x.map(0, [64, 16], 0));
    s.run_block();
    let out = &s.tensors[1];
    for i in 0..2048 {
        let (b, i1, i0) = (i / 1024, (i % 1024) / 64, i % 64);
        let c = [[8, 4], [24, 20]][b];
        let got = f16::from_bits(u16::from_le_bytes([out[2 * i], out[2 * i + 1]])).to_f32();
        assert_eq!(got, f16::from_f32(x.get(c[1] + i1 as i64, c[0] + i0 as i64)).to_f32());
    }
}

#[test]
#[should_panic(expected = "waits forever")]
fn tma_bytes_short_of_the_expectation_never_complete_the_phase() {
    let mut rng = Rng(7);
    let x = Mat::random(20, 70, &mut rng);
    let f = tma_load_kernel([[0, 0], [0, 16]], 4096 + 2);
    let mut s = Sim::new(&f, vec![h16(&x.vals, false), vec![0; 4096]], params(1));
    s.add_tensor_map("tmap", x.map(0, [64, 16], 128));
    s.run_block();
}

/// Warps other than the leader's may read before the leader issues (a
/// race with the TMA's write) or after (a read of bytes in flight).
#[test]
#[should_panic(expected = "TMA load to")]
fn reading_a_tma_destination_before_the_wait_fails() {
    let mut rng = Rng(11);
    let x = Mat::random(20, 70, &mut rng);
    let mut f = tma_load_kernel([[0, 0], [0, 16]], 4096);
    // Move the wait after the copy-out.
    let wait = f.body.iter().position(|s| matches!(s, Stmt::Inst { inst: Inst::MbarWait { .. }, .. })).unwrap();
    let w = f.body.remove(wait);
    f.body.push(w);
    let mut s = Sim::new(&f, vec![h16(&x.vals, false), vec![0; 4096]], params(1));
    s.add_tensor_map("tmap", x.map(0, [64, 16], 128));
    s.run_block();
}

#[test]
fn tma_store_writes_only_in_bounds_elements() {
    let mut rng = Rng(0x1234_5678);
    let x = Mat::random(37, 100, &mut rng);
    let mut k = K::new(128, 8192, &[("tmap", TENSOR_MAP_PARAM), ("out", ".u64")]);
    k.if_leader(vec![Inst::MbarInit { addr: smem(0), count: Operand::Imm(1) }, Inst::FenceMbarrierInit]);
    k.push(Inst::BarSync);
    let load = |c: [i64; 2], tmap: Reg| Inst::TmaLoad {
        dst: smem(1024),
        tmap: Operand::Reg(tmap),
        coords: vec![Operand::Imm(c[0]), Operand::Imm(c[1])],
        mbar: smem(0),
        cache_hint: None,
        cta_dst: false,
        multicast: None,
        region: None,
    };
    k.if_leader(vec![Inst::MbarArriveExpectTx { addr: smem(0), tx_bytes: Operand::Imm(2048) }, load([40, 10], k.tmap)]);
    let p = k.reg(RegClass::Pred);
    k.push(Inst::MbarWait { addr: smem(0), parity: Operand::Imm(0), pred: p });
    // Store the box back at (64, 30): partly out of bounds.
    k.if_leader(vec![
        Inst::TmaStore {
            tmap: Operand::Reg(k.tmap),
            coords: vec![Operand::Imm(64), Operand::Imm(30)],
            src: smem(1024),
            region: None,
        },
        Inst::BulkCommit,
        Inst::BulkWaitRead { pending: 0 },
    ]);
    let f = k.f;
    let before = h16(&x.vals, false);
    let mut s = Sim::new(&f, vec![before.clone(), vec![0; 16]], params(1));
    s.add_tensor_map("tmap", x.map(0, [64, 16], 128));
    s.run_block();
    let after = &s.tensors[0];
    for r in 0..x.rows as i64 {
        for c in 0..x.pitch as i64 {
            let i = 2 * (r as usize * x.pitch + c as usize);
            let got = u16::from_le_bytes([after[i], after[i + 1]]);
            let inside = (30..46).contains(&r) && (64..128).contains(&c) && c < x.cols as i64;
            let want = if inside {
                f16::from_f32(x.get(r - 30 + 10, c - 64 + 40)).to_bits()
            } else {
                u16::from_le_bytes([before[i], before[i + 1]])
            };
            assert_eq!(got, want, "({r}, {c})");
        }
    }
}

#[test]
#[should_panic(expected = "still reads")]
fn overwriting_a_tma_store_source_before_wait_read_fails() {
    let x = Mat::random(16, 64, &mut Rng(3));
    let mut k = K::new(128, 4096, &[("tmap", TENSOR_MAP_PARAM), ("out", ".u64")]);
    k.if_leader(vec![
        Inst::TmaStore {
            tmap: Operand::Reg(k.tmap),
            coords: vec![Operand::Imm(0), Operand::Imm(0)],
            src: smem(1024),
            region: None,
        },
        Inst::BulkCommit,
        Inst::St { space: Space::Shared, ty: "b32", srcs: vec![Operand::Imm(0)], addr: smem(1024), region: None },
    ]);
    let mut s = Sim::new(&k.f, vec![h16(&x.vals, false), vec![0; 16]], params(1));
    s.add_tensor_map("tmap", x.map(0, [64, 16], 0));
    s.run_block();
}

// ---------------------------------------------------------------- wgmma

/// C[64, n] = A[64, 64] · B where A comes from a TMA box of `a` at (0, 0)
/// (or from registers), B from a TMA box of `b`: K-major (`b` is Bᵀ,
/// [n, 64]) or N-major (`b` is [64, n], n = 64); 4 k16 steps.
fn wgmma_case(n: usize, ab: &'static str, b_major: Major, a_in_regs: bool, seed: u64) {
    let bf = ab == "bf16";
    let mut rng = Rng(seed);
    // Awkward global shapes: the boxes reach past the edges (zero fill).
    let a = Mat::random(61, 57, &mut rng);
    let b = match b_major {
        Major::K => Mat::random(n - 3, 50, &mut rng),
        Major::MN => Mat::random(53, n - 5, &mut rng),
    };
    let (a_base, b_base, bar) = (0i64, 8192i64, 8192 + 64 * 2 * 256);
    let a_layout = SharedLayout::for_ldmatrix(64, 64, 2);
    let b_layout = match b_major {
        Major::K => SharedLayout::for_ldmatrix(n as i64, 64, 2),
        Major::MN => SharedLayout::for_ldmatrix(64, n as i64, 2),
    };
    let b_box = match b_major {
        Major::K => [64, n as u32],
        Major::MN => [n as u32, 64],
    };
    let b_bytes = (b_box[0] * b_box[1] * 2) as i64;
    let mut k = K::new(
        128,
        (bar + 64) as u32,
        &[("ta", TENSOR_MAP_PARAM), ("tb", TENSOR_MAP_PARAM), ("afrag", ".u64"), ("out", ".u64")],
    );
    let tb = k.reg(RegClass::B64);
    k.push(Inst::TensorMapAddr { dst: tb, param: "tb".into() });
    k.if_leader(vec![Inst::MbarInit { addr: smem(bar), count: Operand::Imm(1) }, Inst::FenceMbarrierInit]);
    k.push(Inst::BarSync);
    let tma = |dst: i64, tmap: Reg| Inst::TmaLoad {
        dst: smem(dst),
        tmap: Operand::Reg(tmap),
        coords: vec![Operand::Imm(0), Operand::Imm(0)],
        mbar: smem(bar),
        cache_hint: None,
        cta_dst: false,
        multicast: None,
        region: None,
    };
    k.if_leader(vec![
        Inst::MbarArriveExpectTx { addr: smem(bar), tx_bytes: Operand::Imm(8192 + b_bytes) },
        tma(a_base, k.tmap),
        tma(b_base, tb),
    ]);
    let p = k.reg(RegClass::Pred);
    k.push(Inst::MbarWait { addr: smem(bar), parity: Operand::Imm(0), pred: p });
    // Register A: per thread 4 words per k16 step, from `afrag`.
    let afrag: Vec<[Reg; 4]> = (0..4).map(|_| [0; 4].map(|_| k.reg(RegClass::B32))).collect();
    if a_in_regs {
        let g = k.global_addr("afrag", 64);
        for (s, regs) in afrag.iter().enumerate() {
            k.push(Inst::Ld {
                space: Space::Global,
                ty: "b32",
                dsts: regs.to_vec(),
                addr: at(g, 16 * s as i64),
                region: None,
            });
        }
    }
    let d: Vec<Reg> = (0..n / 2).map(|_| k.reg(RegClass::F32)).collect();
    let ad = k.reg(RegClass::B64);
    let bd = k.reg(RegClass::B64);
    k.push(Inst::WgmmaFence);
    for s in 0..4i64 {
        let a_desc = hopper::operand_descriptor(&a_layout, Major::K, a_base as u32, 0, 16 * s).unwrap();
        let b_desc = match b_major {
            Major::K => hopper::operand_descriptor(&b_layout, Major::K, b_base as u32, 0, 16 * s),
            Major::MN => hopper::operand_descriptor(&b_layout, Major::MN, b_base as u32, 16 * s, 0),
        }
        .unwrap();
        k.op("mov.b64", ad, vec![Operand::Imm(a_desc.encode().unwrap() as i64)]);
        k.op("mov.b64", bd, vec![Operand::Imm(b_desc.encode().unwrap() as i64)]);
        k.push(Inst::Wgmma {
            n: n as u32,
            ab,
            d: d.clone(),
            a: if a_in_regs { WgmmaA::Regs(afrag[s as usize]) } else { WgmmaA::Desc(Operand::Reg(ad)) },
            b_desc: Operand::Reg(bd),
            scale_d: Operand::Imm((s > 0) as i64),
            neg_a: false,
            neg_b: false,
            trans_a: false,
            trans_b: b_major == Major::MN,
            regions: vec![],
        });
        // Commit each step; keep one in flight until the end.
        k.push(Inst::WgmmaCommit);
        k.push(Inst::WgmmaWait { pending: 1 });
    }
    k.push(Inst::WgmmaWait { pending: 0 });
    let g = k.global_addr("out", 4 * (n / 2) as i64);
    let srcs: Vec<Operand> = d.iter().map(|r| Operand::Reg(*r)).collect();
    for (j, chunk) in srcs.chunks(4).enumerate() {
        k.push(Inst::St {
            space: Space::Global,
            ty: "f32",
            srcs: chunk.to_vec(),
            addr: at(g, 16 * j as i64),
            region: None,
        });
    }
    let f = k.f;
    // The A fragment per thread from the PTX placement (tile_ir::hopper).
    let mut frag = vec![0u8; 128 * 64];
    for t in 0..128 {
        for s in 0..4 {
            for j in 0..4 {
                let mut w = 0u32;
                for h in 0..2 {
                    let (r, c) = hopper::wgmma_a_regs_coord(t, j, h);
                    let v = a.get(r, c + 16 * s);
                    let bits = if bf { bf16::from_f32(v).to_bits() } else { f16::from_f32(v).to_bits() };
                    w |= (bits as u32) << (16 * h);
                }
                let o = (t as usize * 64) + 16 * s as usize + 4 * j as usize;
                frag[o..o + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
    let mut p = HashMap::new();
    p.insert("afrag".to_string(), GBASE + (2u64 << 32));
    p.insert("out".to_string(), GBASE + (3u64 << 32));
    let mut s = Sim::new(&f, vec![h16(&a.vals, bf), h16(&b.vals, bf), frag, vec![0; 128 * n * 2]], p);
    s.add_tensor_map("ta", a.map(0, [64, 64], 128));
    let bmap = SimTensorMap {
        boxdim: b_box.to_vec(),
        swizzle: if n * 2 >= 128 || b_major == Major::K { 128 } else { (n * 2) as u32 },
        ..b.map(1, [0, 0], 0)
    };
    s.add_tensor_map("tb", bmap);
    s.run_block();
    assert_eq!(s.hopper.wgmmas, 4);
    let out = &s.tensors[3];
    for t in 0..128i64 {
        for i in 0..(n / 2) as i64 {
            let (r, c) = hopper::wgmma_d_coord(t, i);
            let mut want = 0f64;
            for kk in 0..64 {
                let bv = match b_major {
                    Major::K => b.get(c, kk),
                    Major::MN => b.get(kk, c),
                };
                want += rounded(a.get(r, kk), bf) * rounded(bv, bf);
            }
            let o = 4 * (t as usize * n / 2 + i as usize);
            let got = f32::from_le_bytes(out[o..o + 4].try_into().unwrap()) as f64;
            assert!(
                (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                "{ab} n{n} {b_major:?} regA={a_in_regs}: C[{r}][{c}] = {got}, want {want}"
            );
        }
    }
}

#[test]
fn wgmma_kmajor_descriptors_match_the_reference() {
    wgmma_case(64, "f16", Major::K, false, 1);
    wgmma_case(24, "bf16", Major::K, false, 2);
    wgmma_case(136, "f16", Major::K, false, 3);
}

#[test]
fn wgmma_nmajor_b_matches_the_reference() {
    wgmma_case(64, "bf16", Major::MN, false, 4);
    wgmma_case(64, "f16", Major::MN, true, 5);
}

#[test]
fn wgmma_register_a_matches_the_reference() {
    wgmma_case(32, "bf16", Major::K, true, 6);
    wgmma_case(256, "f16", Major::K, true, 7);
}

#[test]
#[should_panic(expected = "not retired by wgmma.wait_group")]
fn wgmma_without_wait_fails() {
    let mut k = K::new(128, 2048, &[("out", ".u64")]);
    let d: Vec<Reg> = (0..4).map(|_| k.reg(RegClass::F32)).collect();
    let desc =
        hopper::MatrixDescriptor { start: 0, lbo: 128, sbo: 256, base_offset: 0, swizzle: hopper::Swizzle::None };
    let dr = k.reg(RegClass::B64);
    k.op("mov.b64", dr, vec![Operand::Imm(desc.encode().unwrap() as i64)]);
    // Shared memory written by every thread, fenced into the async proxy, then the barrier.
    let s = k.reg(RegClass::B32);
    k.op("mul.lo.u32", s, vec![Operand::Reg(k.tid), Operand::Imm(16)]);
    k.push(Inst::St {
        space: Space::Shared,
        ty: "b32",
        srcs: vec![Operand::Imm(0x3C00_3C00); 4],
        addr: at(s, 0),
        region: None,
    });
    k.push(Inst::FenceProxyAsync);
    k.push(Inst::BarSync);
    k.push(Inst::Wgmma {
        n: 8,
        ab: "f16",
        d,
        a: WgmmaA::Desc(Operand::Reg(dr)),
        b_desc: Operand::Reg(dr),
        scale_d: Operand::Imm(0),
        neg_a: false,
        neg_b: false,
        trans_a: false,
        trans_b: false,
        regions: vec![],
    });
    k.push(Inst::WgmmaCommit);
    Sim::new(&k.f, vec![vec![0; 16]], params(0)).run_block();
}

#[test]
fn elect_sync_picks_one_lane_per_warp() {
    let mut k = K::new(96, 16, &[("out", ".u64")]);
    let p = k.reg(RegClass::Pred);
    k.push(Inst::ElectSync { pred: p });
    let v = k.reg(RegClass::B32);
    k.op("selp.b32", v, vec![Operand::Imm(1), Operand::Imm(0), Operand::Reg(p)]);
    let g = k.global_addr("out", 4);
    k.push(Inst::St { space: Space::Global, ty: "b32", srcs: vec![Operand::Reg(v)], addr: at(g, 0), region: None });
    let mut s = Sim::new(&k.f, vec![vec![0; 96 * 4]], params(0));
    s.run_block();
    let got: Vec<u32> = s.tensors[0].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    for w in 0..3 {
        assert_eq!(got[32 * w..32 * w + 32].iter().sum::<u32>(), 1, "warp {w}");
    }
}

/// The leader loads a 16×64 box on the mbarrier at 0; warp 0 waits for it
/// and arrives on the mbarrier at 8 (32 arrivals) — after its wait, or
/// before when `arrive_first`; warp 1 waits on 8 and reads the box.
fn tma_handoff(arrive_first: bool) -> Function {
    let mut k = K::new(64, 4096, &[("tmap", TENSOR_MAP_PARAM), ("out", ".u64")]);
    k.if_leader(vec![
        Inst::MbarInit { addr: smem(0), count: Operand::Imm(1) },
        Inst::MbarInit { addr: smem(8), count: Operand::Imm(32) },
        Inst::FenceMbarrierInit,
    ]);
    k.push(Inst::BarSync);
    k.if_leader(vec![
        Inst::MbarArriveExpectTx { addr: smem(0), tx_bytes: Operand::Imm(2048) },
        Inst::TmaLoad {
            dst: smem(1024),
            tmap: Operand::Reg(k.tmap),
            coords: vec![Operand::Imm(0), Operand::Imm(0)],
            mbar: smem(0),
            cache_hint: None,
            cta_dst: false,
            multicast: None,
            region: None,
        },
    ]);
    let p = k.reg(RegClass::Pred);
    let wait = |addr| Stmt::Inst { inst: Inst::MbarWait { addr, parity: Operand::Imm(0), pred: p }, guard: None };
    let arrive = Stmt::Inst { inst: Inst::MbarArrive { addr: smem(8) }, guard: None };
    let warp0 = if arrive_first { vec![arrive, wait(smem(0))] } else { vec![wait(smem(0)), arrive] };
    // Warp 1: thread 32 + i reads bytes 1024 + 4i and writes them to out[4i].
    let g = k.global_addr("out", 4);
    let s = k.reg(RegClass::B32);
    k.op("mul.lo.u32", s, vec![Operand::Reg(k.tid), Operand::Imm(4)]);
    let v = k.reg(RegClass::B32);
    let warp1 = vec![
        wait(smem(8)),
        Stmt::Inst {
            inst: Inst::Ld { space: Space::Shared, ty: "b32", dsts: vec![v], addr: at(s, 1024 - 128), region: None },
            guard: None,
        },
        Stmt::Inst {
            inst: Inst::St {
                space: Space::Global,
                ty: "b32",
                srcs: vec![Operand::Reg(v)],
                addr: at(g, -128),
                region: None,
            },
            guard: None,
        },
    ];
    let lo = k.reg(RegClass::Pred);
    k.op("setp.lt.u32", lo, vec![Operand::Reg(k.tid), Operand::Imm(32)]);
    k.f.body.push(Stmt::If { cond: lo, negate: false, uniform: false, then: warp0, otherwise: warp1 });
    k.f
}

#[test]
fn tma_bytes_are_ordered_by_a_wait_on_their_mbarrier_only() {
    let x = Mat::random(16, 64, &mut Rng(5));
    let run = |f: &Function| {
        let mut s = Sim::new(f, vec![h16(&x.vals, false), vec![0; 128]], params(1));
        s.add_tensor_map("tmap", x.map(0, [64, 16], 0));
        s.run_block();
        s.tensors[1].clone()
    };
    // Warp 1 is ordered after the landing through warp 0's wait and arrive.
    let out = run(&tma_handoff(false));
    for i in 0..64 {
        let got = f16::from_bits(u16::from_le_bytes([out[2 * i], out[2 * i + 1]])).to_f32();
        assert_eq!(got, f16::from_f32(x.get(0, i as i64)).to_f32(), "element {i}");
    }
    // Warp 0 arrives before its wait: warp 1 reads the landed bytes unordered.
    let f = tma_handoff(true);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&f)));
    let e = r.expect_err("a read of TMA bytes with no wait on their mbarrier passed");
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("after a TMA load completing on the mbarrier at 0's write with no synchronization"), "{msg}");
}

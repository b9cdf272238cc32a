//! A block-level simulator of the Thread IR, for tests: runs every thread of
//! a block in lockstep over the structured control flow (so shuffles see
//! their partners), with bounds-checked global and shared memory: an access
//! outside a tensor or outside the dynamic shared memory fails the test, so
//! masking bugs show up even when the results happen to be right.
//!
//! `cp.async` is asynchronous as on the hardware: the source is read at
//! issue, but the data lands in shared memory only when a
//! `cp.async.wait_group` of the issuing thread retires its group (a write by
//! that thread at that moment, for race detection). Reading or writing a
//! byte whose cp.async has not landed fails the test, as does a block that
//! exits with cp.asyncs in flight.
//!
//! Hopper instructions (see `hopper.rs` next to this file for their
//! semantics, written from the PTX ISA): mbarriers with arrival counts,
//! transaction bytes and phase parity; TMA loads that land only when a wait
//! on their mbarrier lets time pass; TMA stores with bulk groups; wgmma with
//! shared-memory descriptors or register A, asynchronous until
//! `wgmma.wait_group`; elect.sync and setmaxnreg.
// Per-thread and per-byte state is indexed by thread and byte number on purpose.
#![allow(clippy::needless_range_loop)]
#![allow(dead_code)]

mod hopper;
#[allow(unused_imports)]
pub use hopper::SimTensorMap;

use std::collections::HashMap;
use tile_ir::thread_ir::*;

pub const GBASE: u64 = 0x1000_0000;

/// Runs `f` (compiled from `k`) over the grid of `k` at `dims`: tensors in
/// parameter order, each at `GBASE + i * 2^32`, then `dims` (in `k.dims`
/// order), then `scalars` (bit patterns, in scalar-parameter order). Returns
/// the finished simulation (its tensors, counters, Hopper state).
pub fn launch<'f>(
    f: &'f Function,
    k: &tile_ir::Kernel,
    tensors: Vec<Vec<u8>>,
    dims: &[i64],
    scalars: &[u64],
) -> Sim<'f> {
    let grid = tile_ir::abi::eval_grid(k, dims).unwrap();
    launch_shaped(f, tensors, dims, scalars, grid)
}

/// [`launch`] with the launch shape `shape` (`nctaid`) rather than the
/// kernel's grid: e.g. a grid folded onto x (`tile_ir::abi::launch_shape`).
pub fn launch_shaped<'f>(
    f: &'f Function,
    tensors: Vec<Vec<u8>>,
    dims: &[i64],
    scalars: &[u64],
    shape: [u32; 3],
) -> Sim<'f> {
    let nt = tensors.len();
    let mut params = HashMap::new();
    for (i, (name, _)) in f.params.iter().enumerate() {
        let val = if i < nt {
            GBASE + ((i as u64) << 32)
        } else if i < nt + dims.len() {
            dims[i - nt] as u32 as u64
        } else {
            scalars[i - nt - dims.len()]
        };
        params.insert(name.clone(), val);
    }
    let mut sm = Sim::new(f, tensors, params);
    sm.run_grid(shape);
    sm
}

/// The cp.asyncs of one group: (shared address, bytes that will land).
type AsyncGroup = Vec<(usize, Vec<u8>)>;

pub struct Sim<'f> {
    pub f: &'f Function,
    /// Global memory: each tensor at `GBASE + i * 2^32`.
    pub tensors: Vec<Vec<u8>>,
    pub params: HashMap<String, u64>,
    pub ctaid: [u32; 3],
    pub nctaid: [u32; 3],
    regs: Vec<Vec<u64>>,
    shared: Vec<u8>,
    threads: usize,
    pub steps: u64,
    /// Race detection on shared memory: per byte, the last writer and the
    /// barrier epoch of the write, the last reader (or `usize::MAX` for
    /// several) and the epoch of the reads.
    epoch: u64,
    shadow: Vec<(usize, u64, usize, u64)>,
    /// Per thread: cp.asyncs issued since the last commit, and the committed
    /// groups still in flight (oldest first); each copy is (shared address, bytes).
    async_open: Vec<AsyncGroup>,
    async_groups: Vec<Vec<AsyncGroup>>,
    /// Per shared byte: the thread whose cp.async to it is in flight.
    async_owner: Vec<usize>,
    /// Number of cp.asyncs issued (for tests).
    pub cp_async_count: u64,
    /// Hopper state (mbarriers, TMA, bulk groups, wgmma groups).
    pub hopper: hopper::HopperState,
}

fn f32b(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
fn bf(x: f32) -> u64 {
    x.to_bits() as u64
}
fn h2f(x: u64) -> f32 {
    half::f16::from_bits(x as u16).to_f32()
}
fn bh2f(x: u64) -> f32 {
    half::bf16::from_bits(x as u16).to_f32()
}

impl<'f> Sim<'f> {
    pub fn new(f: &'f Function, tensors: Vec<Vec<u8>>, params: HashMap<String, u64>) -> Sim<'f> {
        let threads = f.threads as usize;
        Sim {
            f,
            tensors,
            params,
            ctaid: [0; 3],
            nctaid: [1; 3],
            regs: vec![],
            shared: vec![],
            threads,
            steps: 0,
            epoch: 1,
            shadow: vec![],
            async_open: vec![],
            async_groups: vec![],
            async_owner: vec![],
            cp_async_count: 0,
            hopper: hopper::HopperState::default(),
        }
    }

    pub fn run_grid(&mut self, grid: [u32; 3]) {
        self.nctaid = grid;
        for z in 0..grid[2] {
            for y in 0..grid[1] {
                for x in 0..grid[0] {
                    self.ctaid = [x, y, z];
                    self.run_block();
                }
            }
        }
    }

    pub fn run_block(&mut self) {
        self.regs = vec![vec![0xDEAD_BEEF_DEAD_BEEF; self.f.regs.len()]; self.threads];
        // Garbage in shared memory: reads of unwritten data poison results.
        self.shared = vec![0x7F; self.f.shared_bytes as usize];
        self.shadow = vec![(usize::MAX, 0, usize::MAX, 0); self.f.shared_bytes as usize];
        self.epoch += 1;
        self.async_open = vec![vec![]; self.threads];
        self.async_groups = vec![vec![]; self.threads];
        self.async_owner = vec![usize::MAX; self.f.shared_bytes as usize];
        self.hopper_block_start();
        let mask = vec![true; self.threads];
        let body = &self.f.body;
        self.exec(body, &mask);
        self.hopper_block_end();
        for t in 0..self.threads {
            assert!(
                self.async_open[t].is_empty() && self.async_groups[t].is_empty(),
                "thread {t} exits with cp.async copies in flight"
            );
        }
    }

    /// Fails when a byte of `[addr, addr+len)` has a cp.async in flight.
    fn check_landed(&self, t: usize, addr: u64, len: usize, what: &str) {
        if what != "reads" {
            self.check_bulk_source(t, addr, len);
        }
        for b in addr as usize..(addr as usize + len).min(self.async_owner.len()) {
            let o = self.async_owner[b];
            assert!(o != hopper::TMA_OWNER, "thread {t} {what} shared byte {b} while a TMA load to it is in flight (no mbarrier wait has completed its phase)");
            assert!(
                o == usize::MAX,
                "thread {t} {what} shared byte {b} while thread {o}'s cp.async to it is in flight (no cp.async.wait_group retired it)"
            );
        }
    }

    fn val(&self, t: usize, o: &Operand) -> u64 {
        match o {
            Operand::Reg(r) => self.regs[t][r.0 as usize],
            Operand::Imm(v) => *v as u64,
            Operand::F32(x) => bf(*x),
            Operand::B16(b) => *b as u64,
            Operand::Special(Special::TidX) => t as u64,
            Operand::Special(Special::CtaId(a)) => self.ctaid[*a as usize] as u64,
            Operand::Special(Special::NctaId(a)) => self.nctaid[*a as usize] as u64,
            Operand::Symbol(s) if s == SMEM => 0,
            Operand::Symbol(s) => panic!("unknown symbol {s}"),
        }
    }

    fn exec(&mut self, body: &[Stmt], mask: &[bool]) {
        for s in body {
            match s {
                Stmt::Comment(_) => {}
                Stmt::Inst { inst, guard } => {
                    if let Inst::BarSync = inst {
                        assert!(mask.iter().all(|m| *m), "bar.sync in divergent code");
                        self.epoch += 1;
                        continue;
                    }
                    if let Inst::ShflBfly { dst, src, lane_mask } = inst {
                        assert!(guard.is_none());
                        assert!(mask.iter().all(|m| *m), "shfl.sync with inactive lanes");
                        let vals: Vec<u64> = (0..self.threads).map(|t| self.regs[t][src.0 as usize]).collect();
                        for t in 0..self.threads {
                            let p = t ^ *lane_mask as usize;
                            assert_eq!(p / 32, t / 32);
                            self.regs[t][dst.0 as usize] = vals[p];
                        }
                        continue;
                    }
                    if self.hopper_collective(inst, guard, mask) {
                        continue;
                    }
                    if matches!(inst, Inst::Ldmatrix { .. } | Inst::Mma { .. }) {
                        assert!(guard.is_none(), "guarded warp-collective instruction");
                        self.warp_collective(inst, mask);
                        continue;
                    }
                    for t in 0..self.threads {
                        if !mask[t] {
                            continue;
                        }
                        if let Some((p, neg)) = guard {
                            let v = self.regs[t][p.0 as usize] != 0;
                            if v == *neg {
                                continue;
                            }
                        }
                        self.steps += 1;
                        self.inst(t, inst);
                    }
                }
                Stmt::If { cond, negate, uniform, then, otherwise } => {
                    let c: Vec<bool> =
                        (0..self.threads).map(|t| (self.regs[t][cond.0 as usize] != 0) != *negate).collect();
                    let tm: Vec<bool> = (0..self.threads).map(|t| mask[t] && c[t]).collect();
                    let em: Vec<bool> = (0..self.threads).map(|t| mask[t] && !c[t]).collect();
                    if *uniform {
                        assert!(!(tm.iter().any(|x| *x) && em.iter().any(|x| *x)), "uniform branch diverged");
                    }
                    if tm.iter().any(|x| *x) {
                        self.exec(then, &tm);
                    }
                    if em.iter().any(|x| *x) {
                        self.exec(otherwise, &em);
                    }
                }
                Stmt::For { var, start, end, uniform, body, .. } => {
                    for t in 0..self.threads {
                        if mask[t] {
                            self.regs[t][var.0 as usize] = self.val(t, start) as u32 as u64;
                        }
                    }
                    loop {
                        let m: Vec<bool> = (0..self.threads)
                            .map(|t| {
                                mask[t]
                                    && (self.regs[t][var.0 as usize] as u32 as i32) < (self.val(t, end) as u32 as i32)
                            })
                            .collect();
                        if !m.iter().any(|x| *x) {
                            break;
                        }
                        if *uniform {
                            assert_eq!(m, mask.to_vec(), "uniform loop diverged");
                        }
                        self.exec(body, &m);
                        for t in 0..self.threads {
                            if m[t] {
                                let v = &mut self.regs[t][var.0 as usize];
                                *v = ((*v as u32 as i32).wrapping_add(1)) as u32 as u64;
                            }
                        }
                    }
                }
            }
        }
    }

    /// ldmatrix and mma.sync, written from the PTX ISA's fragment
    /// definitions (independently of the code generator): every lane of a
    /// warp must take part.
    fn warp_collective(&mut self, inst: &Inst, mask: &[bool]) {
        for w in 0..self.threads.div_ceil(32) {
            let lanes: Vec<usize> = (w * 32..(w * 32 + 32).min(self.threads)).collect();
            let on = lanes.iter().filter(|&&t| mask[t]).count();
            if on == 0 {
                continue;
            }
            assert_eq!(on, 32, "warp-collective {inst:?} with inactive lanes in warp {w}");
            self.steps += 32;
            match inst {
                Inst::Ldmatrix { trans, dsts, addr, .. } => {
                    // Matrix j's row i (8 halves, 16 bytes) is at lane 8j + i's address.
                    let mut mats = vec![[[0u16; 8]; 8]; dsts.len()];
                    for (j, mat) in mats.iter_mut().enumerate() {
                        for (i, row) in mat.iter_mut().enumerate() {
                            let t = lanes[8 * j + i];
                            let a = self.addr(t, addr);
                            self.race_check(t, a, 16, false);
                            let bytes = self.mem(Space::Shared, a, 16).to_vec();
                            for (e, x) in row.iter_mut().enumerate() {
                                *x = u16::from_le_bytes([bytes[2 * e], bytes[2 * e + 1]]);
                            }
                        }
                    }
                    for (l, &t) in lanes.iter().enumerate() {
                        let (g, q) = (l / 4, l % 4);
                        for (j, d) in dsts.iter().enumerate() {
                            let (lo, hi) = if *trans {
                                (mats[j][2 * q][g], mats[j][2 * q + 1][g])
                            } else {
                                (mats[j][g][2 * q], mats[j][g][2 * q + 1])
                            };
                            self.regs[t][d.0 as usize] = lo as u64 | ((hi as u64) << 16);
                        }
                    }
                }
                Inst::Mma { ab, d, a, b, c } => {
                    let cvt = |x: u64| -> f64 {
                        if *ab == "bf16" {
                            half::bf16::from_bits(x as u16).to_f64()
                        } else {
                            half::f16::from_bits(x as u16).to_f64()
                        }
                    };
                    let mut am = [[0f64; 16]; 16];
                    let mut bm = [[0f64; 8]; 16];
                    let mut cm = [[0f64; 8]; 16];
                    for (l, &t) in lanes.iter().enumerate() {
                        let (g, q) = (l / 4, l % 4);
                        for i in 0..8 {
                            let word = self.regs[t][a[i / 2].0 as usize];
                            let half = (word >> (16 * (i % 2))) & 0xFFFF;
                            let row = g + 8 * ((i >> 1) & 1);
                            let col = 2 * q + (i & 1) + 8 * (i / 4);
                            am[row][col] = cvt(half);
                        }
                        for i in 0..4 {
                            let word = self.regs[t][b[i / 2].0 as usize];
                            let half = (word >> (16 * (i % 2))) & 0xFFFF;
                            let kk = 2 * q + (i & 1) + 8 * (i / 2);
                            bm[kk][g] = cvt(half);
                        }
                        for i in 0..4 {
                            cm[g + 8 * (i / 2)][2 * q + (i & 1)] = f32b(self.regs[t][c[i].0 as usize]) as f64;
                        }
                    }
                    for (l, &t) in lanes.iter().enumerate() {
                        let (g, q) = (l / 4, l % 4);
                        for i in 0..4 {
                            let (row, col) = (g + 8 * (i / 2), 2 * q + (i & 1));
                            let mut acc = cm[row][col];
                            for kk in 0..16 {
                                acc += am[row][kk] * bm[kk][col];
                            }
                            self.regs[t][d[i].0 as usize] = bf(acc as f32);
                        }
                    }
                }
                _ => unreachable!(),
            }
        }
    }

    fn mem(&mut self, space: Space, addr: u64, len: usize) -> &mut [u8] {
        match space {
            Space::Shared => {
                let a = addr as u32 as usize;
                assert!(a + len <= self.shared.len(), "shared access out of bounds: {a}+{len} > {}", self.shared.len());
                assert_eq!(a % len.min(16), 0, "misaligned shared access");
                &mut self.shared[a..a + len]
            }
            Space::Global => {
                assert!(addr >= GBASE, "global address {addr:#x} below any tensor");
                let i = ((addr - GBASE) >> 32) as usize;
                let off = ((addr - GBASE) & 0xFFFF_FFFF) as usize;
                assert!(i < self.tensors.len(), "global address {addr:#x} outside tensors");
                let t = &mut self.tensors[i];
                assert!(
                    off + len <= t.len(),
                    "global access out of bounds: tensor {i} offset {off} len {len} size {}",
                    t.len()
                );
                assert_eq!(off % len.min(16), 0, "misaligned global access");
                &mut t[off..off + len]
            }
            _ => panic!("unsupported space"),
        }
    }

    /// Checks and records a shared-memory access by thread `t`.
    fn race_check(&mut self, t: usize, addr: u64, len: usize, write: bool) {
        if write {
            self.check_no_wgmma_reads(addr as usize, len);
        }
        let e = self.epoch;
        for b in addr as usize..addr as usize + len {
            let (w, we, r, re) = self.shadow[b];
            if we == e && w != t {
                panic!(
                    "shared-memory race at byte {b}: thread {t} {} after thread {w}'s write with no barrier between",
                    if write { "writes" } else { "reads" }
                );
            }
            if write {
                if re == e && r != t {
                    panic!("shared-memory race at byte {b}: thread {t} writes after another thread's read with no barrier between");
                }
                self.shadow[b].0 = t;
                self.shadow[b].1 = e;
            } else {
                let nr = if re == e && r != t { usize::MAX - 1 } else { t };
                self.shadow[b].2 = nr;
                self.shadow[b].3 = e;
            }
        }
    }

    fn addr(&self, t: usize, a: &Address) -> u64 {
        self.val(t, &a.base).wrapping_add(a.offset as u64)
    }

    fn inst(&mut self, t: usize, inst: &Inst) {
        match inst {
            Inst::Op { op, dst, args } => {
                let a: Vec<u64> = args.iter().map(|x| self.val(t, x)).collect();
                let r = eval_op(op, &a);
                self.regs[t][dst.0 as usize] = r;
            }
            Inst::Pack { dst, lo, hi } => {
                let v = (self.regs[t][lo.0 as usize] & 0xFFFF) | ((self.regs[t][hi.0 as usize] & 0xFFFF) << 16);
                self.regs[t][dst.0 as usize] = v;
            }
            Inst::Unpack { lo, hi, src } => {
                let v = self.regs[t][src.0 as usize];
                self.regs[t][lo.0 as usize] = v & 0xFFFF;
                self.regs[t][hi.0 as usize] = (v >> 16) & 0xFFFF;
            }
            Inst::LdParam { dst, name, .. } => {
                self.regs[t][dst.0 as usize] = *self.params.get(name).unwrap_or_else(|| panic!("param {name} not set"));
            }
            Inst::Ld { space, ty, dsts, addr, .. } => {
                let size = ty_size(ty);
                let base = self.addr(t, addr);
                let n = dsts.len();
                if *space == Space::Shared {
                    self.check_landed(t, base, size * n, "reads");
                    self.race_check(t, base, size * n, false);
                }
                let bytes = self.mem(*space, base, size * n).to_vec();
                for (e, d) in dsts.iter().enumerate() {
                    let mut v = 0u64;
                    for b in 0..size {
                        v |= (bytes[e * size + b] as u64) << (8 * b);
                    }
                    if *ty == "s32" {
                        v = v as u32 as u64;
                    }
                    self.regs[t][d.0 as usize] = v;
                }
            }
            Inst::St { space, ty, srcs, addr, .. } => {
                let size = ty_size(ty);
                let base = self.addr(t, addr);
                let vals: Vec<u64> = srcs.iter().map(|s| self.val(t, s)).collect();
                let m = self.mem(*space, base, size * vals.len());
                let _ = m;
                if *space == Space::Shared {
                    self.check_landed(t, base, size * vals.len(), "writes");
                    self.race_check(t, base, size * vals.len(), true);
                    self.note_generic_write(t, base as usize, size * vals.len());
                }
                let m = self.mem(*space, base, size * vals.len());
                for (e, v) in vals.iter().enumerate() {
                    for b in 0..size {
                        m[e * size + b] = (v >> (8 * b)) as u8;
                    }
                }
            }
            Inst::AtomAdd { space, ty, dst, addr, src } => {
                let size = ty_size(ty);
                let base = self.addr(t, addr);
                let x = self.val(t, src);
                let m = self.mem(*space, base, size);
                let mut old = 0u64;
                for b in 0..size {
                    old |= (m[b] as u64) << (8 * b);
                }
                let new = match *ty {
                    "f32" => bf(f32b(old) + f32b(x)),
                    "s32" | "u32" => (old as u32).wrapping_add(x as u32) as u64,
                    "u64" => old.wrapping_add(x),
                    "f16" => half::f16::from_f32(h2f(old) + h2f(x)).to_bits() as u64,
                    "bf16" => half::bf16::from_f32(bh2f(old) + bh2f(x)).to_bits() as u64,
                    _ => panic!("atom type {ty}"),
                };
                for b in 0..size {
                    m[b] = (new >> (8 * b)) as u8;
                }
                self.regs[t][dst.0 as usize] = old;
            }
            Inst::CpAsync { bytes, dst, src, src_bytes, .. } => {
                let bytes = *bytes as usize;
                assert!(matches!(bytes, 4 | 8 | 16), "cp.async of {bytes} bytes");
                let n = self.val(t, src_bytes) as u32 as usize;
                assert!(n <= bytes, "cp.async src_bytes {n} > {bytes}");
                let d = self.addr(t, dst) as u32 as usize;
                assert!(
                    d + bytes <= self.shared.len(),
                    "cp.async to shared out of bounds: {d}+{bytes} > {}",
                    self.shared.len()
                );
                assert_eq!(d % bytes, 0, "misaligned cp.async destination {d}");
                let g = self.addr(t, src);
                let mut data = vec![0u8; bytes];
                if n > 0 {
                    assert_eq!(g % bytes as u64, 0, "misaligned cp.async source {g:#x}");
                    assert!(g >= GBASE, "cp.async source {g:#x} below any tensor");
                    let i = ((g - GBASE) >> 32) as usize;
                    let off = ((g - GBASE) & 0xFFFF_FFFF) as usize;
                    assert!(i < self.tensors.len(), "cp.async source {g:#x} outside tensors");
                    let tn = &self.tensors[i];
                    assert!(
                        off + n <= tn.len(),
                        "cp.async reads out of bounds: tensor {i} offset {off} len {n} size {}",
                        tn.len()
                    );
                    data[..n].copy_from_slice(&tn[off..off + n]);
                }
                // The write may land any time from now: it must not race with
                // other threads' accesses of this epoch, nor with another copy.
                self.check_landed(t, d as u64, bytes, "issues a cp.async to");
                self.race_check(t, d as u64, bytes, true);
                for b in d..d + bytes {
                    self.async_owner[b] = t;
                }
                self.async_open[t].push((d, data));
                self.cp_async_count += 1;
            }
            Inst::CpAsyncCommit => {
                let g = std::mem::take(&mut self.async_open[t]);
                self.async_groups[t].push(g);
            }
            Inst::CpAsyncWait { pending } => {
                while self.async_groups[t].len() > *pending as usize {
                    let g = self.async_groups[t].remove(0);
                    for (d, data) in g {
                        for b in d..d + data.len() {
                            self.async_owner[b] = usize::MAX;
                        }
                        self.race_check(t, d as u64, data.len(), true);
                        self.note_generic_write(t, d, data.len());
                        self.shared[d..d + data.len()].copy_from_slice(&data);
                    }
                }
            }
            Inst::ShflBfly { .. } | Inst::BarSync | Inst::Ldmatrix { .. } | Inst::Mma { .. } => unreachable!(),
            other => self.hopper_inst(t, other),
        }
    }
}

fn ty_size(ty: &str) -> usize {
    match ty {
        "u8" | "s8" => 1,
        "b16" | "f16" | "bf16" | "u16" => 2,
        "u64" | "s64" | "b64" => 8,
        _ => 4,
    }
}

fn cmp<T: PartialOrd>(c: &str, a: T, b: T) -> bool {
    match c {
        "lt" => a < b,
        "le" => a <= b,
        "gt" => a > b,
        "ge" => a >= b,
        "eq" => a == b,
        "ne" => a != b,
        _ => panic!("cmp {c}"),
    }
}

/// Evaluates one `Inst::Op` by its PTX opcode.
pub fn eval_op(op: &str, a: &[u64]) -> u64 {
    let parts: Vec<&str> = op.split('.').collect();
    let name = parts[0];
    let ty = *parts.last().unwrap();
    let s32 = |x: u64| x as u32 as i32;
    let u32v = |x: u64| x as u32;
    let w = |x: i64| x as u32 as u64;
    match (name, ty) {
        ("mov", _) => match ty {
            "pred" => (a[0] != 0) as u64,
            "b16" => a[0] & 0xFFFF,
            "b64" | "u64" | "s64" => a[0],
            _ => a[0] & 0xFFFF_FFFF,
        },
        ("cvta", _) => a[0],
        ("setp", _) => {
            let c = parts[1];
            (match ty {
                "f32" => {
                    let (x, y) = (f32b(a[0]), f32b(a[1]));
                    match c {
                        "neu" => x != y || x.is_nan() || y.is_nan(),
                        _ => cmp(c, x, y),
                    }
                }
                "s32" => cmp(c, s32(a[0]), s32(a[1])),
                "u32" => cmp(c, u32v(a[0]), u32v(a[1])),
                "s64" => cmp(c, a[0] as i64, a[1] as i64),
                _ => panic!("setp {op}"),
            }) as u64
        }
        ("selp", _) => {
            if a[2] != 0 {
                a[0]
            } else {
                a[1]
            }
        }
        (_, "pred") => match name {
            "and" => a[0] & a[1] & 1,
            "or" => (a[0] | a[1]) & 1,
            "xor" => (a[0] ^ a[1]) & 1,
            "not" => (a[0] & 1) ^ 1,
            _ => panic!("{op}"),
        },
        ("cvt", _) => cvt(&parts, a[0]),
        ("mul" | "mad", "s32") if parts.contains(&"wide") => {
            let p = (s32(a[0]) as i64).wrapping_mul(s32(a[1]) as i64);
            (if name == "mad" { p.wrapping_add(a[2] as i64) } else { p }) as u64
        }
        (_, "f32") => {
            let x = f32b(a[0]);
            let y = a.get(1).map(|v| f32b(*v)).unwrap_or(0.0);
            bf(match name {
                "add" => x + y,
                "sub" => x - y,
                "mul" => x * y,
                "div" => x / y,
                "min" => x.min(y),
                "max" => x.max(y),
                "neg" => -x,
                "abs" => x.abs(),
                "fma" => x.mul_add(y, f32b(a[2])),
                "sqrt" => x.sqrt(),
                "ex2" => x.exp2(),
                "lg2" => x.log2(),
                "rsqrt" => 1.0 / x.sqrt(),
                _ => panic!("{op}"),
            })
        }
        (_, "s32" | "u32" | "b32") => {
            let (x, y) = (a[0], a.get(1).copied().unwrap_or(0));
            let signed = ty == "s32";
            match name {
                "add" => w(s32(x).wrapping_add(s32(y)) as i64),
                "sub" => w(s32(x).wrapping_sub(s32(y)) as i64),
                "mul" => w(s32(x).wrapping_mul(s32(y)) as i64),
                "mad" => w(s32(x).wrapping_mul(s32(y)).wrapping_add(s32(a[2])) as i64),
                "div" if signed => w(s32(x).wrapping_div(s32(y)) as i64),
                "div" => (u32v(x) / u32v(y)) as u64,
                "rem" if signed => w(s32(x).wrapping_rem(s32(y)) as i64),
                "rem" => (u32v(x) % u32v(y)) as u64,
                "min" if signed => w(s32(x).min(s32(y)) as i64),
                "min" => u32v(x).min(u32v(y)) as u64,
                "max" if signed => w(s32(x).max(s32(y)) as i64),
                "max" => u32v(x).max(u32v(y)) as u64,
                "neg" => w(s32(x).wrapping_neg() as i64),
                "abs" => w(s32(x).wrapping_abs() as i64),
                "and" => (x & y) & 0xFFFF_FFFF,
                "or" => (x | y) & 0xFFFF_FFFF,
                "xor" => (x ^ y) & 0xFFFF_FFFF,
                "not" => !x & 0xFFFF_FFFF,
                "shl" => {
                    let s = u32v(y);
                    if s >= 32 {
                        0
                    } else {
                        (u32v(x) << s) as u64
                    }
                }
                "shr" if signed => w((s32(x) >> u32v(y).min(31)) as i64),
                "shr" => {
                    let s = u32v(y);
                    if s >= 32 {
                        0
                    } else {
                        (u32v(x) >> s) as u64
                    }
                }
                _ => panic!("{op}"),
            }
        }
        (_, "s64" | "u64" | "b64") => {
            let (x, y) = (a[0] as i64, a.get(1).copied().unwrap_or(0) as i64);
            (match name {
                "add" => x.wrapping_add(y),
                "sub" => x.wrapping_sub(y),
                "mul" => x.wrapping_mul(y),
                "mad" => x.wrapping_mul(y).wrapping_add(a[2] as i64),
                "div" => x.wrapping_div(y),
                "rem" => x.wrapping_rem(y),
                "min" => x.min(y),
                "max" => x.max(y),
                "neg" => x.wrapping_neg(),
                "abs" => x.wrapping_abs(),
                "and" => x & y,
                "or" => x | y,
                "xor" => x ^ y,
                "not" => !x,
                "shl" => x.wrapping_shl(y as u32),
                "shr" => x.wrapping_shr(y as u32),
                _ => panic!("{op}"),
            }) as u64
        }
        _ => panic!("unsupported op {op}"),
    }
}

fn cvt(parts: &[&str], x: u64) -> u64 {
    // cvt[.rnd][.sat].dst.src
    let n = parts.len();
    let (dst, src) = (parts[n - 2], parts[n - 1]);
    let fsrc = match src {
        "f32" => Some(f32b(x)),
        "f16" => Some(h2f(x)),
        "bf16" => Some(bh2f(x)),
        _ => None,
    };
    let isrc: Option<i64> = match src {
        "s32" => Some(x as u32 as i32 as i64),
        "u32" => Some(x as u32 as i64),
        "s64" | "u64" => Some(x as i64),
        "u16" => Some((x & 0xFFFF) as i64),
        _ => None,
    };
    match dst {
        "f16" => half::f16::from_f32(fsrc.expect("f16 from float")).to_bits() as u64,
        "bf16" => half::bf16::from_f32(fsrc.expect("bf16 from float")).to_bits() as u64,
        "f32" => match (fsrc, isrc) {
            (Some(f), _) => {
                if parts.contains(&"rzi") {
                    bf(f.trunc())
                } else {
                    bf(f)
                }
            }
            (_, Some(i)) => bf(i as f32),
            _ => panic!("cvt"),
        },
        "s32" => match (fsrc, isrc) {
            (Some(f), _) => (f as i32) as u32 as u64,
            (_, Some(i)) => i as i32 as u32 as u64,
            _ => panic!(),
        },
        "u32" => match (fsrc, isrc) {
            (Some(f), _) => (f as u32) as u64,
            (_, Some(i)) => i as u32 as u64,
            _ => panic!(),
        },
        "s64" => match (fsrc, isrc) {
            (Some(f), _) => (f as i64) as u64,
            (_, Some(i)) => i as u64,
            _ => panic!(),
        },
        "u64" => isrc.expect("u64 from int") as u64,
        _ => panic!("cvt to {dst}"),
    }
}

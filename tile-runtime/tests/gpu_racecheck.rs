//! compute-sanitizer racecheck's RAW hazards on the epilogue's staging
//! scratch of two-consumer-warpgroup (ping-pong) warp-specialized kernels
//! (issue 9; BENCHMARKS.md, session 9: written by warpgroup 0, read by
//! warpgroup 1, with `bar.sync 1, 256` between them in the PTX), on the
//! GPU (feature `gpu`, compute capability 9.x; elsewhere each test says so
//! and passes). Each test is one variant of FlashAttention at head dim 128
//! over `[b, h, s, d]` (`tile_testkit::attention_4d_sized`: the kernel of
//! `tests/gpu_wsloop.rs`'s `attention_bhsd_d128`: 128 query rows over two
//! consumer warpgroups, key blocks of 64, P·V deferred, the 4-D output
//! staged through shared memory after the loop), compiled here, its Thread
//! IR changed in one construct where the test says so, its PTX launched on
//! a few awkward shapes against an f64 CPU reference (outputs poisoned
//! first), so that racecheck runs each on its own:
//!
//! - `default`: what the compiler makes now (the ping-pong balanced: no
//!   hand-over left for after the loop, both warpgroups wait at `n`
//!   barriers in a loop of `n` iterations);
//! - `old_last_turn`: the protocol that racecheck reported (warpgroup 1
//!   hands over in its last iteration too, warpgroup 0 takes that turn
//!   after the loop, `bar.sync 2, 256`: one `bar.sync` more on warpgroup 0);
//! - `old_last_turn_wg1_extra_sync`: that, with warpgroup 1 waiting at a
//!   barrier of its own (`bar.sync 5, 128`) where warpgroup 0 takes the
//!   last turn, so that both execute as many `bar.sync`s (if racecheck
//!   orders accesses by counting each thread's barriers, this one is
//!   clean and `old_last_turn` is not);
//! - `old_last_turn_epilogue_own_barrier`: `old_last_turn` with the
//!   `bar.sync`s after the loop (the loop's and the epilogue's, between the
//!   scratch's writes and reads) on barrier 4 instead of 1;
//! - `ping_pong_off`: `CompileOptions::ping_pong` off (no named barriers
//!   but `bar.sync 1, 256`);
//! - `d64_default`: head dim 64 (the ping-pong with Q·Kᵀ issued ahead,
//!   like `tests/gpu_paged.rs`'s two-warpgroup kernel), as compiled.
//!
//! And the smallest reproduction, hand-written PTX without wgmma or TMA
//! (`minimal_*`): 384 threads, the third warpgroup exiting at once (a
//! producer's place); the two others write 4 bytes each to shared memory,
//! `bar.sync 1, 256`, and each thread reads what the thread 128 away (the
//! other warpgroup) wrote, then stores it (checked). Before the write:
//!
//! - `minimal_none`: nothing;
//! - `minimal_last_turn`: warpgroup 1 `bar.arrive 2, 256`, warpgroup 0
//!   `bar.sync 2, 256` (the old ping-pong's last turn);
//! - `minimal_last_turn_wg1_extra_sync`: that, and warpgroup 1 `bar.sync 5, 128`;
//! - `minimal_wg0_extra_sync`: warpgroup 0 alone `bar.sync 5, 128` (no
//!   `bar.arrive` at all: one barrier more on one side);
//! - `minimal_last_turn_own_barrier`: `minimal_last_turn` with the
//!   epilogue's barrier on 4.
//!
//! None of them has a race by the PTX ISA (the write and the read are on
//! either side of a `bar.sync 1, 256` both warpgroups execute once).
//! Measured on the H200 (racecheck, session 10): `minimal_none` 0 hazards,
//! `minimal_last_turn` 1 (1664 errors), `minimal_last_turn_wg1_extra_sync`
//! 0, `minimal_wg0_extra_sync` 1, `minimal_last_turn_own_barrier` 1:
//! racecheck orders two threads' accesses by how many barrier instructions
//! each has executed, so one warpgroup's extra `bar.sync` (on any barrier,
//! race-free) makes it report RAW hazards: a false positive, which the
//! balanced ping-pong no longer triggers.
//!
//! Run each under the sanitizer, e.g.
//! `compute-sanitizer --tool racecheck cargo test -p tile-runtime --release --features gpu --test gpu_racecheck -- --test-threads 1 old_last_turn`
//! (or the test binary itself with the test's name).
#![cfg(feature = "gpu")]

mod common;

use common::{gpu, leak, leak_meta, Rng};
use tile_ir::print::parse_kernel;
use tile_ir::thread_ir::{Function, Inst, Stmt};
use tile_ir::{compile_variants, CompileOptions, Compiled, Target};
use tile_runtime::__private::{launch, KernelArg};
use tile_runtime::{assert_close, f16, DeviceTensor, KernelTarget, TensorMapMeta};
use tile_testkit::{attention_4d_sized, Layout4d};

/// The warp-specialized loop variant of attention at head dim `d` (128 query
/// rows over two consumer warpgroups, key blocks of 64) under `options`
/// (by its schedule's name: another may be preferred to it).
fn variant(d: i64, options: CompileOptions) -> (tile_ir::Kernel, Compiled) {
    let k = parse_kernel(&attention_4d_sized(Layout4d::Bhsd, d, 128, 64, 256)).unwrap();
    let v = compile_variants(&k, Target::Sm90a, options).unwrap_or_else(|e| panic!("{e:?}"));
    let c = v.into_iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp_specialized_loop variant");
    (k, c)
}

/// The index in `body` (the function's top level) of the consumers' loop.
fn consumer_loop(body: &[Stmt]) -> usize {
    fn has_wgmma(body: &[Stmt]) -> bool {
        body.iter().any(|s| match s {
            Stmt::Inst { inst, .. } => matches!(inst, Inst::Wgmma { .. }),
            Stmt::If { then, otherwise, .. } => has_wgmma(then) || has_wgmma(otherwise),
            Stmt::For { body, .. } => has_wgmma(body),
            Stmt::Comment(_) => false,
        })
    }
    body.iter().position(|s| matches!(s, Stmt::For { uniform: true, body, .. } if has_wgmma(body))).unwrap()
}

/// `f` with the ping-pong of before: warpgroup 1's hand-over unconditional
/// in every iteration, and after the loop (before its `bar.sync 1`),
/// warpgroup 0 taking the last one (`bar.sync 2, 256`) when the loop ran,
/// warpgroup 1 running `wg1_after` there.
fn with_old_last_turn(f: &Function, wg1_after: Vec<Stmt>) -> Function {
    let mut f = f.clone();
    // The first grant, before the loop: `if ran { if wg1 { bar.arrive 2 } }`.
    let (ran, wg1) = f
        .body
        .iter()
        .find_map(|s| match s {
            Stmt::If { cond, uniform: true, then, .. } => match &then[..] {
                [Stmt::If { cond: w, negate: false, then: t, .. }]
                    if matches!(t[..], [Stmt::Inst { inst: Inst::NamedBarArrive { id: 2, .. }, .. }]) =>
                {
                    Some((*cond, *w))
                }
                _ => None,
            },
            _ => None,
        })
        .expect("the ping-pong's first grant");
    let l = consumer_loop(&f.body);
    // Warpgroup 1's hand-over: `if k + 1 < b { bar.arrive 2 }` → `bar.arrive 2`.
    fn unguard(body: &mut [Stmt]) -> usize {
        let mut n = 0;
        for s in body.iter_mut() {
            if let Stmt::If { uniform: true, then, otherwise, .. } = s {
                if otherwise.is_empty()
                    && matches!(then[..], [Stmt::Inst { inst: Inst::NamedBarArrive { id: 2, .. }, .. }])
                {
                    *s = then[0].clone();
                    n += 1;
                    continue;
                }
            }
            match s {
                Stmt::If { then, otherwise, .. } => n += unguard(then) + unguard(otherwise),
                Stmt::For { body, .. } => n += unguard(body),
                _ => {}
            }
        }
        n
    }
    let Stmt::For { body, .. } = &mut f.body[l] else { unreachable!() };
    assert_eq!(unguard(body), 1, "warpgroup 1's guarded hand-over");
    let bar = l + f.body[l..].iter().position(|s| matches!(s, Stmt::Inst { inst: Inst::BarSync, .. })).unwrap();
    let sync2 = Stmt::Inst { inst: Inst::NamedBarSync { id: 2, threads: 256 }, guard: None };
    let turn = Stmt::If { cond: wg1, negate: true, uniform: false, then: vec![sync2], otherwise: wg1_after };
    f.body.insert(bar, Stmt::If { cond: ran, negate: false, uniform: true, then: vec![turn], otherwise: vec![] });
    f
}

/// `f` with every top-level `bar.sync 1, T` after the consumers' loop on
/// barrier `id` instead.
fn post_loop_barriers_on(f: &Function, id: u32) -> Function {
    let mut f = f.clone();
    let threads = f.barrier_threads.unwrap();
    let l = consumer_loop(&f.body);
    let mut n = 0;
    for s in &mut f.body[l..] {
        if let Stmt::Inst { inst: inst @ Inst::BarSync, .. } = s {
            *inst = Inst::NamedBarSync { id, threads };
            n += 1;
        }
    }
    assert!(n >= 2, "the loop's barrier and the epilogue's: {n}");
    f
}

/// The f64 reference of `o` and `lse` (natural log) for `[b, h, s, d]`
/// tensors, softmax of `q·kᵀ / sqrt(d)`.
fn reference(
    q: &[f16],
    k: &[f16],
    v: &[f16],
    (b, h, sq, sk, d): (usize, usize, usize, usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let (mut o, mut lse) = (vec![0.0; b * h * sq * d], vec![0.0; b * h * sq]);
    let scale = 1.0 / (d as f64).sqrt();
    for bh in 0..b * h {
        for i in 0..sq {
            let qi = &q[(bh * sq + i) * d..][..d];
            let s: Vec<f64> = (0..sk)
                .map(|j| {
                    let kj = &k[(bh * sk + j) * d..][..d];
                    qi.iter().zip(kj).map(|(a, b)| a.to_f64() * b.to_f64()).sum::<f64>() * scale
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let l: f64 = p.iter().sum();
            for c in 0..d {
                o[(bh * sq + i) * d + c] = (0..sk).map(|j| p[j] * v[(bh * sk + j) * d + c].to_f64()).sum::<f64>() / l;
            }
            lse[bh * sq + i] = m + l.ln();
        }
    }
    (o, lse)
}

/// Launches `f` (the Thread IR of `c`, perhaps changed) on shapes of one
/// and several key blocks, lengths off the block, and compares with the
/// reference. Skips (and says so) off compute capability 9.x.
fn check(name: &str, d: usize, k: &tile_ir::Kernel, c: &Compiled, f: &Function) {
    let (device, stream) = gpu();
    if device.compute_capability().is_none_or(|cc| cc.0 != 9) {
        eprintln!("{name}: not a 9.x device, the sm_90a variant does not run here");
        return;
    }
    let ptx = tile_ir::ptx::try_emit(f, Target::Sm90a).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let maps: Vec<TensorMapMeta> = c
        .tensor_maps
        .iter()
        .map(|m| TensorMapMeta {
            tensor: m.tensor,
            box_shape: Box::leak(m.box_shape.clone().into_boxed_slice()),
            swizzle_bytes: m.swizzle.bytes(),
        })
        .collect();
    let meta = leak_meta(
        k,
        vec![KernelTarget {
            arch: "sm_90a",
            schedule: c.schedule,
            ptx: leak(ptx),
            shared_bytes: c.shared_bytes,
            threads: c.threads,
            tensor_maps: Box::leak(maps.into_boxed_slice()),
            persistent: c.persistent,
            cubin: None,
        }],
    );
    let mut rng = Rng::new(0x4ace ^ d as u64);
    for (b, h, sq, sk) in [(1, 2, 128, 64), (1, 1, 100, 130), (2, 1, 200, 257), (1, 1, 1, 1)] {
        let random = |rng: &mut Rng, n: usize, amp: f64| -> Vec<f16> {
            (0..n).map(|_| f16::from_f64(rng.f64() * amp)).collect()
        };
        let (q, kk, v) = (
            random(&mut rng, b * h * sq * d, 2.0),
            random(&mut rng, b * h * sk * d, 2.0),
            random(&mut rng, b * h * sk * d, 1.0),
        );
        let qt = DeviceTensor::from_slice(&stream, &q, &[b, h, sq, d]).unwrap();
        let kt = DeviceTensor::from_slice(&stream, &kk, &[b, h, sk, d]).unwrap();
        let vt = DeviceTensor::from_slice(&stream, &v, &[b, h, sk, d]).unwrap();
        let mut ot = DeviceTensor::from_slice(&stream, &vec![f16::NAN; b * h * sq * d], &[b, h, sq, d]).unwrap();
        let mut lt = DeviceTensor::from_slice(&stream, &vec![f32::NAN; b * h * sq], &[b, h, sq]).unwrap();
        let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
        launch(
            &stream,
            meta,
            &mut [
                KernelArg::tensor(&qt),
                KernelArg::tensor(&kt),
                KernelArg::tensor(&vt),
                KernelArg::tensor_mut(&mut ot),
                KernelArg::tensor_mut(&mut lt),
                KernelArg::F32(scale),
            ],
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (o, lse) = reference(&q, &kk, &v, (b, h, sq, sk, d));
        let shape = format!("{name} b{b} h{h} sq{sq} sk{sk}");
        assert_close(&ot.to_vec(&stream).unwrap(), &o, 1e-2).unwrap_or_else(|e| panic!("{shape}: o: {e}"));
        assert_close(&lt.to_vec(&stream).unwrap(), &lse, 1e-3).unwrap_or_else(|e| panic!("{shape}: lse: {e}"));
    }
    assert_eq!(device.launch_counts(meta), [4], "{name}");
}

#[test]
fn default() {
    let (k, c) = variant(128, CompileOptions::default());
    assert_eq!(tile_ir::ptx::try_emit(&c.function, Target::Sm90a).unwrap(), c.ptx);
    assert!(c.ptx.contains("bar.arrive 2, 256;") && c.ptx.contains("bar.sync 1, 256;"));
    check("default", 128, &k, &c, &c.function);
}

#[test]
fn old_last_turn() {
    let (k, c) = variant(128, CompileOptions::default());
    check("old_last_turn", 128, &k, &c, &with_old_last_turn(&c.function, vec![]));
}

#[test]
fn old_last_turn_wg1_extra_sync() {
    let (k, c) = variant(128, CompileOptions::default());
    let own = Stmt::Inst { inst: Inst::NamedBarSync { id: 5, threads: 128 }, guard: None };
    check("old_last_turn_wg1_extra_sync", 128, &k, &c, &with_old_last_turn(&c.function, vec![own]));
}

#[test]
fn old_last_turn_epilogue_own_barrier() {
    let (k, c) = variant(128, CompileOptions::default());
    let f = post_loop_barriers_on(&with_old_last_turn(&c.function, vec![]), 4);
    check("old_last_turn_epilogue_own_barrier", 128, &k, &c, &f);
}

#[test]
fn ping_pong_off() {
    let (k, c) = variant(128, CompileOptions { ping_pong: false, ..CompileOptions::default() });
    assert!(!c.ptx.contains("bar.arrive"));
    check("ping_pong_off", 128, &k, &c, &c.function);
}

#[test]
fn d64_default() {
    let (k, c) = variant(64, CompileOptions::default());
    assert!(c.ptx.contains("bar.arrive 2, 256;"));
    check("d64_default", 64, &k, &c, &c.function);
}

/// The minimal kernel (see the module doc), `pre` run before the write,
/// the epilogue's barrier `id`, as one PTX module with entry `race`.
fn minimal_ptx(pre: &str, id: u32) -> String {
    format!(
        ".version 8.0
.target sm_90a
.address_size 64

.visible .entry race(.param .u64 p_out)
.maxntid 384, 1, 1
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 buf[1024];
    mov.u32 %r0, %tid.x;
    setp.ge.u32 %p1, %r0, 256;
    @%p1 exit;
    setp.ge.u32 %p0, %r0, 128;
{pre}
    shl.b32 %r1, %r0, 2;
    mov.u32 %r2, buf;
    add.s32 %r3, %r2, %r1;
    st.shared.u32 [%r3], %r0;
    bar.sync {id}, 256;
    add.s32 %r4, %r0, 128;
    and.b32 %r4, %r4, 255;
    shl.b32 %r5, %r4, 2;
    add.s32 %r6, %r2, %r5;
    ld.shared.u32 %r7, [%r6];
    mov.u32 %r8, %ctaid.x;
    mad.lo.s32 %r9, %r8, 256, %r0;
    ld.param.u64 %rd0, [p_out];
    cvta.to.global.u64 %rd1, %rd0;
    mul.wide.u32 %rd2, %r9, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r7;
    ret;
}}
"
    )
}

/// Warpgroup 0 runs `wg0`, warpgroup 1 `wg1` (PTX lines).
fn per_warpgroup(wg0: &str, wg1: &str) -> String {
    format!("    @%p0 bra $L_wg1;\n{wg0}    bra $L_pre_end;\n$L_wg1:\n{wg1}$L_pre_end:\n")
}

/// Loads and launches the minimal kernel on 8 blocks; checks what each
/// thread read. Skips (and says so) off compute capability 9.x.
fn minimal(name: &str, pre: &str, id: u32) {
    use std::ffi::{c_void, CString};
    use tile_runtime::cudarc::driver::{result, sys};
    let (device, stream) = gpu();
    if device.compute_capability().is_none_or(|cc| cc.0 != 9) {
        eprintln!("{name}: not a 9.x device, the sm_90a kernel does not run here");
        return;
    }
    let blocks = 8usize;
    let ctx = device.cuda_context().unwrap();
    ctx.bind_to_thread().unwrap();
    let src = CString::new(minimal_ptx(pre, id)).unwrap();
    // SAFETY: NUL-terminated PTX; the context is current.
    let module =
        unsafe { result::module::load_data(src.as_ptr() as *const c_void) }.unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let func = unsafe { result::module::get_function(module, CString::new("race").unwrap()) }.unwrap();
    let out = DeviceTensor::<u32>::zeros(&stream, &[blocks * 256]).unwrap();
    let mut ptr = out.device_ptr().unwrap();
    let mut params: Vec<*mut c_void> = vec![&mut ptr as *mut u64 as *mut c_void];
    let cu_stream: sys::CUstream = stream.cuda_stream().unwrap().cu_stream();
    // SAFETY: one pointer parameter to `blocks · 256` u32s.
    unsafe { result::launch_kernel(func, (blocks as u32, 1, 1), (384, 1, 1), 0, cu_stream, &mut params) }.unwrap();
    let got = out.to_vec(&stream).unwrap();
    // SAFETY: the launch above has completed (`to_vec` synchronizes).
    unsafe { result::module::unload(module) }.unwrap();
    for (i, v) in got.iter().enumerate() {
        assert_eq!(*v as usize, (i % 256 + 128) % 256, "{name}: thread {} of block {}", i % 256, i / 256);
    }
}

#[test]
fn minimal_none() {
    minimal("minimal_none", "", 1);
}

#[test]
fn minimal_last_turn() {
    minimal("minimal_last_turn", &per_warpgroup("    bar.sync 2, 256;\n", "    bar.arrive 2, 256;\n"), 1);
}

#[test]
fn minimal_last_turn_wg1_extra_sync() {
    let pre = per_warpgroup("    bar.sync 2, 256;\n", "    bar.arrive 2, 256;\n    bar.sync 5, 128;\n");
    minimal("minimal_last_turn_wg1_extra_sync", &pre, 1);
}

#[test]
fn minimal_wg0_extra_sync() {
    minimal("minimal_wg0_extra_sync", &per_warpgroup("    bar.sync 5, 128;\n", ""), 1);
}

#[test]
fn minimal_last_turn_own_barrier() {
    minimal("minimal_last_turn_own_barrier", &per_warpgroup("    bar.sync 2, 256;\n", "    bar.arrive 2, 256;\n"), 4);
}

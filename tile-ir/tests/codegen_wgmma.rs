//! `gemm` → wgmma in the general sm_90a lowering: gemm kernels in text form
//! compiled for `Target::Sm90a` and run on the Thread IR simulator (whose
//! wgmma, descriptor, `fence.proxy.async` and race semantics are written
//! from the PTX ISA in `sim/hopper.rs`, independently of the lowering)
//! against f64 references at sizes that are not multiples of the tiles:
//! f16 and bf16, both transposes, 32/64/128-byte swizzles, one and two
//! warpgroups, plain and software-pipelined loops, `clear`, and the
//! FlashAttention inner loop (P·V with A from registers). Plus: the PTX has
//! `wgmma.mma_async` exactly for the eligible gemms on sm_90a (mma.sync for
//! the others and on sm_80), assembles with ptxas for sm_90a without
//! spills, and the accumulator layout is the wgmma one.

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::{check_attention, decode, random, reference, rel_l2, run_on, Rng};
use tile_ir::print::parse_kernel;
use tile_ir::*;
use tile_testkit::{attention_text, ATTENTION, MATMUL};

fn compiled(text: &str, target: Target) -> Compiled {
    let k = parse_kernel(text).unwrap_or_else(|e| panic!("parse: {e:?}"));
    compile(&k, target).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name))
}

/// Shape of a generated gemm kernel.
#[derive(Clone, Debug)]
struct G {
    threads: u32,
    bm: i64,
    bn: i64,
    bk: i64,
    dt: &'static str,
    ta: bool,
    tb: bool,
    /// Pipeline stages (0: a plain serial loop).
    stages: u32,
    /// The accumulator starts as 7 and the first iteration's gemm clears it.
    clear: bool,
}

impl G {
    fn new(threads: u32, bm: i64, bn: i64, bk: i64) -> G {
        G { threads, bm, bn, bk, dt: "f16", ta: false, tb: false, stages: 0, clear: false }
    }
    fn dtype(&self) -> DType {
        if self.dt == "f16" {
            DType::F16
        } else {
            DType::BF16
        }
    }
    /// `C[M, N] (f32) = op(A) · op(B)`, A `[M, K]` (`[K, M]` with `ta`), B `[K, N]` (`[N, K]` with `tb`).
    fn text(&self) -> String {
        let G { threads, bm, bn, bk, dt, ta, tb, stages, clear } = self.clone();
        let a_shape = if ta { "K, M" } else { "M, K" };
        let b_shape = if tb { "N, K" } else { "K, N" };
        let a_s = if ta { format!("{bk}, {bm}") } else { format!("{bm}, {bk}") };
        let b_s = if tb { format!("{bn}, {bk}") } else { format!("{bk}, {bn}") };
        let a_org = if ta { format!("k * {bk}, by * {bm}") } else { format!("by * {bm}, k * {bk}") };
        let b_org = if tb { format!("bx * {bn}, k * {bk}") } else { format!("k * {bk}, bx * {bn}") };
        let (at, bt) = (if ta { ".t" } else { "" }, if tb { ".t" } else { "" });
        let kind = if stages > 0 { format!("pipelined({stages}) ") } else { String::new() };
        let (init, step) = if clear {
            (
                "7.0",
                format!("if k == 0 {{\n      gemm a_s{at}, b_s{bt} -> acc, clear\n    }} else {{\n      gemm a_s{at}, b_s{bt} -> acc\n    }}"),
            )
        } else {
            ("0.0", format!("gemm a_s{at}, b_s{bt} -> acc"))
        };
        format!(
            "kernel g<%0 M, %1 K, %2 N>(@0 a: &{dt}[{a_shape}], @1 b: &{dt}[{b_shape}], @2 c: &mut f32[M, N]) threads={threads} grid=((N + {bn1}) / {bn}, (M + {bm1}) / {bm}, 1) {{
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared {dt}[{a_s}]
  @4 b_s: shared {dt}[{b_s}]
  @5 acc: fragment f32[{bm}, {bn}]
  fill acc, {init}
  for %5 k in {kind}0..(K + {bk1}) / {bk} {{
    copy a[{a_org}] -> a_s
    copy b[{b_org}] -> b_s
    {step}
  }}
  copy acc -> c[by * {bm}, bx * {bn}]
}}",
            bn1 = bn - 1,
            bm1 = bm - 1,
            bk1 = bk - 1,
        )
    }

    /// Runs the kernel for `target` on random `m × n × kk` inputs and
    /// compares with the f64 reference.
    fn check(&self, target: Target, m: usize, n: usize, kk: usize) {
        let dt = self.dtype();
        let mut rng = Rng(0x5EED ^ (m * 7919 + n * 31 + kk) as u64);
        let (ab, av) = random(&mut rng, dt, m * kk, -1.0, 1.0);
        let (bb, bv) = random(&mut rng, dt, kk * n, -1.0, 1.0);
        let out =
            run_on(target, &self.text(), vec![ab, bb, vec![0xFF; 4 * m * n]], &[m as i64, kk as i64, n as i64], &[]);
        let got: Vec<f64> = out[2].chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect();
        let want = reference(m, n, kk, &av, &bv, self.ta, self.tb);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
                "{self:?} {m}×{n}×{kk}: C[{}, {}] = {g}, want {w}",
                i / n,
                i % n
            );
        }
    }
}

fn assert_wgmma(text: &str) -> Compiled {
    let c = compiled(text, Target::Sm90a);
    assert!(c.ptx.contains("wgmma.mma_async.sync.aligned.m64n"), "no wgmma in:\n{}", c.thread_ir);
    assert!(!c.ptx.contains("mma.sync.aligned"), "mma.sync left in:\n{}", c.thread_ir);
    assert!(!c.ptx.contains("ldmatrix"), "ldmatrix left in:\n{}", c.thread_ir);
    assert!(c.ptx.contains("wgmma.fence.sync.aligned") && c.ptx.contains("wgmma.commit_group.sync.aligned"));
    assert!(c.ptx.contains("wgmma.wait_group.sync.aligned 0"));
    let s80 = compiled(text, Target::Sm80);
    assert!(s80.ptx.contains("mma.sync.aligned") && !s80.ptx.contains("wgmma"), "sm_80 must keep mma.sync");
    c
}

fn assert_no_spills(c: &Compiled, name: &str) {
    if let Some(r) = ptxas::assemble(name, &c.ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores") && r.contains("0 bytes spill loads"), "{name} spills:\n{r}");
        // ptxas serializes wgmmas whose registers it sees touched in flight.
        assert!(!r.contains("serialized"), "{name}: ptxas serializes the wgmmas:\n{r}");
    }
}

#[test]
fn one_warpgroup_f16_bf16_both_transposes() {
    for dt in ["f16", "bf16"] {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            // K tile 32: 64-byte K-major rows; MN-major tiles of 64 columns: 128-byte rows.
            let g = G { dt, ta, tb, ..G::new(128, 64, 64, 32) };
            let c = assert_wgmma(&g.text());
            assert_no_spills(&c, &format!("wgmma_{dt}_{ta}_{tb}"));
            g.check(Target::Sm90a, 70, 65, 75);
            g.check(Target::Sm90a, 64, 64, 32);
        }
    }
}

#[test]
fn swizzle_spans_32_64_128_and_narrow_n() {
    // K tile 16 (32-byte rows), 64 (128-byte rows); N = 32, 24, 8 (K-major B).
    for (bn, bk, tb) in [(64, 16, true), (64, 64, true), (32, 64, true), (24, 32, true), (8, 16, true), (32, 32, false)]
    {
        let g = G { tb, ..G::new(128, 64, bn, bk) };
        let c = assert_wgmma(&g.text());
        assert_no_spills(&c, &format!("wgmma_n{bn}_k{bk}"));
        g.check(Target::Sm90a, 67, 2 * bn as usize + 3, 100);
    }
}

#[test]
fn two_warpgroups_wide_n() {
    // 256 threads: warpgroup 1 reads A rows 64..128; N = 128 and 256 (K-major B).
    for bn in [128, 256] {
        let g = G { tb: true, ..G::new(256, 128, bn, 32) };
        let c = assert_wgmma(&g.text());
        assert_no_spills(&c, &format!("wgmma_2wg_n{bn}"));
        g.check(Target::Sm90a, 130, bn as usize + 9, 40);
    }
}

#[test]
fn pipelined_loops_and_clear() {
    for stages in [2, 3] {
        for (ta, tb, dt) in [(false, true, "f16"), (true, false, "bf16")] {
            let g = G { ta, tb, dt, stages, ..G::new(128, 64, 64, 32) };
            let c = assert_wgmma(&g.text());
            assert_no_spills(&c, &format!("wgmma_pipe{stages}_{ta}_{tb}"));
            // The wait for iteration k's wgmmas moved around the back-edge:
            // it comes right before iteration k+1's barrier (after its
            // cp.async wait), and once more after the loop.
            let lines: Vec<&str> =
                c.ptx.lines().map(str::trim).filter(|l| !l.starts_with("fence.proxy.async")).collect();
            let rotated = lines.windows(3).any(|w| {
                w[0].starts_with("cp.async.wait_group")
                    && w[1] == "wgmma.wait_group.sync.aligned 0;"
                    && w[2].starts_with("bar.sync")
            });
            assert!(rotated, "wgmma wait not deferred to the next iteration:\n{}", c.thread_ir);
            // More k-steps than stages, fewer, and a partial last one.
            g.check(Target::Sm90a, 65, 70, 161);
            g.check(Target::Sm90a, 64, 64, 20);
        }
    }
    let g = G { tb: true, stages: 3, clear: true, ..G::new(256, 128, 64, 64) };
    let c = assert_wgmma(&g.text());
    assert!(c.thread_ir.matches("wgmma.mma_async").count() >= 8, "{}", c.thread_ir);
    g.check(Target::Sm90a, 129, 64, 130);
    let g = G { clear: true, ..G::new(128, 64, 32, 16) };
    assert_wgmma(&g.text());
    g.check(Target::Sm90a, 64, 40, 50);
}

/// Generic writes that wgmma reads are fenced into the async proxy before
/// the barrier (the simulator fails a wgmma reading unfenced bytes).
#[test]
fn proxy_fences_order_generic_writes_before_wgmma() {
    for stages in [0, 2] {
        let g = G { tb: true, stages, ..G::new(128, 64, 64, 32) };
        let c = assert_wgmma(&g.text());
        assert!(c.ptx.contains("fence.proxy.async.shared::cta"), "{}", c.thread_ir);
        // The fence sits right before a barrier.
        let lines: Vec<&str> = c.ptx.lines().map(str::trim).collect();
        for (i, l) in lines.iter().enumerate() {
            if l.starts_with("fence.proxy.async") {
                assert!(lines[i + 1].starts_with("bar.sync"), "fence not followed by a barrier: {}", lines[i + 1]);
            }
        }
    }
    // sm_80 has neither.
    let s80 = compiled(&G { tb: true, ..G::new(128, 64, 64, 32) }.text(), Target::Sm80);
    assert!(!s80.ptx.contains("fence.proxy.async"));
}

/// Gemms wgmma cannot describe stay on mma.sync, unchanged, on sm_90a:
/// 384 threads (three warpgroups), M not 64 per warpgroup, K-major rows of
/// 96 bytes (padded), MN-major B rows of 192 bytes (N = 96: padded) and of
/// 16 bytes (N = 8).
#[test]
fn ineligible_gemms_keep_mma_sync() {
    let mma_only = |g: &G| {
        let c = compiled(&g.text(), Target::Sm90a);
        assert!(
            c.ptx.contains("mma.sync.aligned") && !c.ptx.contains("wgmma"),
            "expected mma.sync only:\n{}",
            c.thread_ir
        );
        assert!(!c.ptx.contains("fence.proxy.async"));
        assert!(!c.layouts.iter().any(|(_, l)| l.contains("panels")), "{:?}", c.layouts);
    };
    mma_only(&G::new(384, 64, 64, 32));
    mma_only(&G::new(128, 32, 64, 32));
    mma_only(&G { tb: true, ..G::new(128, 64, 64, 48) });
    mma_only(&G::new(128, 64, 96, 32));
    mma_only(&G::new(128, 64, 8, 32));
    // And they still compute the right thing there.
    G::new(128, 32, 64, 32).check(Target::Sm90a, 40, 70, 50);
    G::new(128, 64, 96, 32).check(Target::Sm90a, 64, 100, 40);
}

/// Operands with rows wider than 128 bytes are stored as 64-column panels
/// on sm_90a when a wgmma reads them: the example GEMM's `[32, 128]` B
/// (MN-major, LBO = panel size), K tiles of 128 (K-major, a k16 slice per
/// panel), a `[32, 128]` MN-major A read by two warpgroups (one panel
/// each), and a 256-column B. sm_80 keeps `for_ldmatrix`.
#[test]
fn panelled_operands_wider_than_128_bytes() {
    let cases = [
        (G { stages: 3, ..G::new(256, 128, 128, 32) }, (130, 129, 70)),
        (G { tb: true, ..G::new(128, 64, 64, 128) }, (64, 70, 200)),
        (G { ta: true, ..G::new(256, 128, 64, 32) }, (130, 64, 33)),
        (G { dt: "bf16", stages: 2, ..G::new(128, 64, 256, 16) }, (64, 260, 40)),
        (G { ta: true, tb: true, ..G::new(256, 128, 128, 128) }, (128, 128, 128)),
    ];
    for (g, (m, n, kk)) in cases {
        let c = assert_wgmma(&g.text());
        assert!(c.layouts.iter().any(|(_, l)| l.contains("panels of 64 columns")), "{:?}", c.layouts);
        let s80 = compiled(&g.text(), Target::Sm80);
        assert!(!s80.layouts.iter().any(|(_, l)| l.contains("panels")), "{:?}", s80.layouts);
        assert_no_spills(&c, &format!("wgmma_panels_{}_{}_{}", g.bn, g.bk, g.ta));
        g.check(Target::Sm90a, m, n, kk);
    }
    // The example GEMM's current configuration (128×256×64, 3 stages): the
    // general variant the runtime falls back to when TMA cannot be used.
    let big = G { stages: 3, ..G::new(256, 128, 256, 64) };
    let c = assert_wgmma(&big.text());
    assert_no_spills(&c, "wgmma_128x256x64");
    big.check(Target::Sm90a, 130, 260, 130);
    // The example GEMM (f16 output) as the macro lowers it.
    let text = MATMUL.text();
    let c = assert_wgmma(&text);
    assert_no_spills(&c, "matmul_wgmma");
    for (m, n, kk) in [(130, 129, 70), (1, 1, 1)] {
        let mut rng = Rng(0xBEEF ^ (m * 31 + n + kk) as u64);
        let (ab, av) = random(&mut rng, DType::F16, m * kk, -1.0, 1.0);
        let (bb, bv) = random(&mut rng, DType::F16, kk * n, -1.0, 1.0);
        let out =
            run_on(Target::Sm90a, &text, vec![ab, bb, vec![0xFF; 2 * m * n]], &[m as i64, kk as i64, n as i64], &[]);
        let err = rel_l2(&decode(DType::F16, &out[2]), &reference(m, n, kk, &av, &bv, false, false));
        assert!(err <= 2e-3, "matmul {m}x{n}x{kk}: relative L2 error {err:.3e}");
    }
}

#[test]
fn accumulator_has_the_wgmma_layout() {
    let text = G { tb: true, ..G::new(256, 128, 64, 32) }.text();
    let k = parse_kernel(&text).unwrap();
    let acc = k.buffers.iter().position(|b| b.name == "acc").map(|i| BufferId(i as u32)).unwrap();
    let want = layout::FragLayout::full(hopper::wgmma_accumulator(128, 64, 256).unwrap()).describe();
    let s90 = compile(&k, Target::Sm90a).unwrap();
    let got = |c: &Compiled| c.layouts.iter().find(|(n, _)| n == "acc").map(|x| x.1.clone()).unwrap();
    assert_eq!(got(&s90), want);
    // sm_80 keeps the warp policy's grid.
    let s80 = compile(&k, Target::Sm80).unwrap();
    let grid = layout::mma_warp_grid(128, 64, 256, WarpPolicy::Square).unwrap();
    assert_eq!(got(&s80), layout::FragLayout::full(layout::RootLayout::mma_accumulator(128, 64, 256, grid)).describe());
    let plan = passes::layout_infer::infer_layouts_for(&k, Target::Sm90a).unwrap();
    assert_eq!(plan.frags[&acc].describe(), want);
    assert!(passes::layout_infer::wgmma_accumulators(&k, Target::Sm80).is_empty());
}

// ------------------------------------------------------- FlashAttention

/// Head dim 128 (V `[64, 128]`: an MN-major B in two 64-column panels,
/// Q and K K-major in two panels), two warpgroups of 64 query rows each, bf16.
#[test]
fn flash_attention_wide_heads_two_warpgroups_bf16() {
    assert_eq!(attention_text(64, 64, 128, "f16"), ATTENTION);
    let t = attention_text(128, 64, 128, "f16");
    let c = assert_wgmma(&t);
    assert!(c.layouts.iter().any(|(n, l)| n == "v_s" && l.contains("panels")), "{:?}", c.layouts);
    assert_no_spills(&c, "attention_d128");
    check_attention(Target::Sm90a, &t, DType::F16, 128, 70, 100, 0xA77E ^ (70 * 1000 + 100 + 128), 5e-3);
    let t = attention_text(64, 128, 256, "bf16");
    let c = assert_wgmma(&t);
    assert_no_spills(&c, "attention_2wg_bf16");
    check_attention(Target::Sm90a, &t, DType::BF16, 64, 130, 129, 0xA77E ^ (130 * 1000 + 129 + 64), 2e-2);
}

#[test]
fn flash_attention_pv_from_registers() {
    let c = assert_wgmma(ATTENTION);
    // S = Q·Kᵀ from shared memory (descriptor A), O += P·V with A from registers.
    assert_eq!(c.thread_ir.matches("wgmma.mma_async").count(), 8, "{}", c.thread_ir);
    assert!(
        c.ptx.lines().any(|l| l.contains("wgmma.mma_async") && l.contains("}, {")),
        "no register-A wgmma:\n{}",
        c.ptx
    );
    assert_no_spills(&c, "attention_wgmma");
    for (sq, sk) in [(70, 129), (64, 64), (1, 200)] {
        check_attention(Target::Sm90a, ATTENTION, DType::F16, 64, sq, sk, 0xA77E ^ (sq * 1000 + sk) as u64, 5e-3);
    }
}

/// Removes every `fence.proxy.async` from a Thread IR body.
fn strip_proxy_fences(body: &mut Vec<thread_ir::Stmt>) -> usize {
    use thread_ir::{Inst, Stmt};
    let before = body.len();
    body.retain(|s| !matches!(s, Stmt::Inst { inst: Inst::FenceProxyAsync, .. }));
    let mut n = before - body.len();
    for s in body.iter_mut() {
        match s {
            Stmt::If { then, otherwise, .. } => n += strip_proxy_fences(then) + strip_proxy_fences(otherwise),
            Stmt::For { body, .. } => n += strip_proxy_fences(body),
            _ => {}
        }
    }
    n
}

/// The fences are needed: without them the simulator (PTX ISA: generic
/// writes reach the async proxy only through `fence.proxy.async`) fails.
#[test]
fn wgmma_reading_unfenced_generic_writes_fails() {
    for stages in [0, 2] {
        let g = G { tb: true, stages, ..G::new(128, 64, 64, 32) };
        let k = parse_kernel(&g.text()).unwrap();
        let mut f = compile(&k, Target::Sm90a).unwrap().function;
        assert!(strip_proxy_fences(&mut f.body) > 0);
        let (m, n, kk) = (64usize, 64usize, 64usize);
        let params = sim::plain_params(&f, &k, 3, &[m as i64, kk as i64, n as i64], &[], 0);
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut sm =
                sim::Sim::new(&f, vec![vec![0; 2 * m * kk], vec![0; 2 * kk * n], vec![0; 4 * m * n]], params.clone());
            sm.run_block();
        }));
        let msg = run.expect_err("a wgmma read unfenced generic writes and the simulator let it pass");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("fence.proxy.async"), "{msg}");
    }
}

/// A panelled B read by a wgmma gemm and, through ldmatrix, by a gemm that
/// stays on mma.sync (M = 32 is not a warpgroup's 64 rows): both results
/// right, from one `[32, 128]` tile in 64-column panels.
#[test]
fn panelled_tile_shared_by_wgmma_and_mma_sync() {
    let text = "kernel two<%0 K, %1 N>(@0 a: &f16[64, K], @1 a2: &f16[32, K], @2 b: &f16[K, N], @3 c: &mut f32[64, N], @4 c2: &mut f32[32, N]) threads=128 grid=((N + 127) / 128, 1, 1) {
  %2 bx = block_idx.x
  @5 a_s: shared f16[64, 32]
  @6 a2_s: shared f16[32, 32]
  @7 b_s: shared f16[32, 128]
  @8 acc: fragment f32[64, 128]
  @9 acc2: fragment f32[32, 128]
  fill acc, 0.0
  fill acc2, 0.0
  for %3 k in 0..(K + 31) / 32 {
    copy a[0, k * 32] -> a_s
    copy a2[0, k * 32] -> a2_s
    copy b[k * 32, bx * 128] -> b_s
    gemm a_s, b_s -> acc
    gemm a2_s, b_s -> acc2
  }
  copy acc -> c[0, bx * 128]
  copy acc2 -> c2[0, bx * 128]
}";
    let c = compiled(text, Target::Sm90a);
    assert!(
        c.ptx.contains("wgmma.mma_async") && c.ptx.contains("mma.sync.aligned") && c.ptx.contains("ldmatrix"),
        "{}",
        c.thread_ir
    );
    assert!(c.layouts.iter().any(|(n, l)| n == "b_s" && l.contains("panels of 64 columns")), "{:?}", c.layouts);
    assert_no_spills(&c, "wgmma_and_mma");
    let (kk, n) = (70usize, 200usize);
    let mut rng = Rng(0x7770);
    let (ab, av) = random(&mut rng, DType::F16, 64 * kk, -1.0, 1.0);
    let (a2b, a2v) = random(&mut rng, DType::F16, 32 * kk, -1.0, 1.0);
    let (bb, bv) = random(&mut rng, DType::F16, kk * n, -1.0, 1.0);
    let out = run_on(
        Target::Sm90a,
        text,
        vec![ab, a2b, bb, vec![0xFF; 4 * 64 * n], vec![0xFF; 4 * 32 * n]],
        &[kk as i64, n as i64],
        &[],
    );
    let f32s = |b: &[u8]| b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect::<Vec<_>>();
    for (got, want) in [
        (f32s(&out[3]), reference(64, n, kk, &av, &bv, false, false)),
        (f32s(&out[4]), reference(32, n, kk, &a2v, &bv, false, false)),
    ] {
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-3 * (1.0 + w.abs()), "element {i}: {g}, want {w}");
        }
    }
}

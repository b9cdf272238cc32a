//! Code generation tests: kernels built by hand, compiled for sm_80 and
//! sm_90a, assembled with ptxas (`TILE_PTXAS`, else `ptxas` on PATH; skipped
//! when neither exists unless `CI` is set), and checked for PTX structure.

mod ptxas;
use ptxas::assemble;
use tile_ir::*;

mod kernels;
use kernels::*;

struct Built {
    sm80: Compiled,
    sm90: Compiled,
    reports: Vec<String>,
}

fn build(k: &Kernel) -> Built {
    let sm80 = compile(k, Target::Sm80).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
    let sm90 = compile(k, Target::Sm90a).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
    let mut reports = vec![];
    for (c, arch) in [(&sm80, "sm_80"), (&sm90, "sm_90a")] {
        assert!(c.ptx.contains(&format!(".target {arch}")));
        assert!(c.ptx.contains(".version 8.0"));
        assert!(c.ptx.contains(".address_size 64"));
        assert!(c.ptx.contains(&format!(".visible .entry {}(", k.name)));
        assert!(c.ptx.contains(&format!(".maxntid {}, 1, 1", k.threads)));
        if let Some(r) = assemble(&k.name, &c.ptx, arch) {
            reports.push(r);
        }
    }
    Built { sm80, sm90, reports }
}

fn no_spills(b: &Built) {
    for r in &b.reports {
        assert!(r.contains("0 bytes spill stores") && r.contains("0 bytes spill loads"), "spills:\n{r}");
    }
}

/// A programmatic dependent (`Kernel::dependent_launch`) waits for the
/// kernel before it ahead of everything else on sm_90a (before reading its
/// parameters) and assembles; sm_80, without the feature, gets no wait;
/// an ordinary kernel gets none anywhere.
#[test]
fn a_dependent_launch_waits_first() {
    let mut k = vector_add(256, 1024);
    let plain = build(&k);
    assert!(!plain.sm80.ptx.contains("griddepcontrol") && !plain.sm90.ptx.contains("griddepcontrol"));
    k.dependent_launch = true;
    let b = build(&k);
    assert!(!b.sm80.ptx.contains("griddepcontrol"), "{}", b.sm80.ptx);
    let body = b.sm90.ptx.split_once('{').expect("an entry body").1;
    let first = body.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with(".reg")).unwrap_or_default();
    assert_eq!(first, "griddepcontrol.wait;", "{}", b.sm90.ptx);
    assert_eq!(b.sm90.ptx.matches("griddepcontrol.wait").count(), 1);
    // The rest is the ordinary kernel's.
    assert_eq!(b.sm90.ptx.replacen("    griddepcontrol.wait;\n", "", 1), plain.sm90.ptx);
}

#[test]
fn vector_add_compiles_vectorized() {
    let k = vector_add(256, 1024);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        assert!(c.ptx.contains("ld.global.v4.f32"), "{}", c.ptx);
        assert!(c.ptx.contains("st.global.v4.f32"));
        assert!(!c.ptx.contains("bar.sync"), "no shared memory, no barrier");
        assert_eq!(c.shared_bytes, 0);
        // Params in ABI order: tensors, then dims.
        let pa = c.ptx.find(".param .u64 p0_a").unwrap();
        let pb = c.ptx.find(".param .u64 p1_b").unwrap();
        let pc = c.ptx.find(".param .u64 p2_c").unwrap();
        let pn = c.ptx.find(".param .s32 p3_N").unwrap();
        assert!(pa < pb && pb < pc && pc < pn);
    }
    no_spills(&b);
}

#[test]
fn softmax_compiles_with_shuffles_and_cross_warp_reduction() {
    let k = softmax(256, 4096);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        assert!(c.ptx.contains("shfl.sync.bfly.b32"));
        assert!(c.ptx.contains("ld.global.v4.b32"), "16-byte f16 loads");
        assert!(c.ptx.contains("ex2.approx.ftz.f32"));
        assert!(c.ptx.contains("bar.sync 0"), "rows span 8 warps: shared-memory reduction");
        assert!(c.shared_bytes > 0);
    }
    no_spills(&b);
}

/// Reduce a [A, B] (or [A, B, C]) fragment along `dim` and write the result.
#[test]
fn reductions_along_every_dim_assemble() {
    let cases: &[&[i64]] =
        &[&[4, 64], &[16, 256], &[3, 100], &[64, 8], &[2, 4, 8], &[8, 3, 64], &[4, 32, 32], &[1, 1024]];
    for shape in cases {
        for dim in 0..shape.len() {
            for (op, dt, threads) in
                [(ReduceOp::Sum, DType::F32, 128), (ReduceOp::Max, DType::F16, 256), (ReduceOp::Min, DType::BF16, 64)]
            {
                let k = reduce_kernel(shape, dim, op, dt, threads);
                let b = build(&k);
                let _ = b;
            }
        }
    }
}

/// Copies a [R, C] tile global → shared → fragment (transposed through shared by
/// element stores) → global.
#[test]
fn transpose_through_shared_has_one_barrier() {
    let k = shared_transpose(128, 32, 64);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        assert_eq!(c.ptx.matches("bar.sync").count(), 1, "{}", c.thread_ir);
        assert!(c.ptx.contains("st.shared.v4.b32"), "16-byte shared stores");
        assert!(c.ptx.contains("ld.shared.b16"));
        assert_eq!(c.shared_bytes, 32 * 64 * 2);
    }
}

/// A serial loop with dynamic bounds accumulating tiles of a row through shared memory,
/// with if/else, scalar params, casts and atomics.
#[test]
fn loop_with_shared_if_atomics_and_locals() {
    let _ = VarId(0);
    let k = loop_kernel(256);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        assert!(c.ptx.contains("atom.global.add.f32"));
        assert!(c.ptx.contains("atom.global.add.s32"));
        assert!(c.ptx.contains("cvt.rzi.s32.f32"));
        assert!(c.ptx.contains("bra.uni"));
        // Launch ABI: tensors, then dims, then scalars, each in order.
        let order = [
            ".param .u64 p0_x",
            ".param .u64 p1_total",
            ".param .u64 p2_counts",
            ".param .s32 p3_N",
            ".param .f32 p4_alpha",
            ".param .u32 p5_lim",
            ".param .b16 p6_h",
        ];
        let pos: Vec<usize> = order.iter().map(|p| c.ptx.find(p).unwrap_or_else(|| panic!("{p} missing"))).collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "{pos:?}");
        // Barrier before the nest (RAW) and at the loop head (WAR across the back-edge).
        assert!(c.ptx.matches("bar.sync").count() >= 2, "{}", c.thread_ir);
    }
}

#[test]
fn casts_kernel_assembles() {
    let k = casts_kernel(128, 512);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        assert!(c.ptx.contains("cvt.rn.bf16.f32"));
        // `c / 7`, `c % 7`: a multiply-high, not ptxas's reciprocal sequence.
        assert!(!c.ptx.contains("div.s32") && !c.ptx.contains("rem.s32") && c.ptx.contains("mul.hi.u32"));
        assert!(!c.ptx.contains("bar.sync"));
    }
}

#[test]
fn copies_kernel_assembles_with_exactly_the_needed_barriers() {
    let k = copies_kernel(128);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        // f → sh then sh → g (RAW); fill sl then thread 0 stores sl[3] (WAW);
        // then sl → z (RAW).
        assert_eq!(c.ptx.matches("bar.sync").count(), 3, "{}", c.thread_ir);
        assert!(c.ptx.contains("ld.global.f32"), "unaligned origin: scalar loads");
        assert!(c.ptx.contains("st.global.v4.b32"), "aligned f16 stores: 16-byte vectors");
    }
}

#[test]
fn row_scale_kernel_assembles() {
    for (threads, bm, bn, d) in [(128u32, 8i64, 64i64, 32i64), (256, 64, 128, 128)] {
        let b = build(&row_scale_kernel(threads, bm, bn, d));
        no_spills(&b);
    }
}

#[test]
fn divergent_kernel_assembles() {
    let b = build(&divergent_kernel(128, 256));
    for c in [&b.sm80, &b.sm90] {
        assert!(c.ptx.contains("lg2.approx.ftz.f32") && c.ptx.contains("rsqrt.approx.ftz.f32"));
        // The explicit barrier is kept and also covers the shared-memory RAW.
        assert_eq!(c.ptx.matches("bar.sync").count(), 1, "{}", c.thread_ir);
    }
}

#[test]
fn atomics_assemble() {
    let b = build(&atomics_kernel(64, 128, false));
    for c in [&b.sm80, &b.sm90] {
        assert!(c.ptx.contains("atom.global.add.u32"));
        assert!(c.ptx.contains("atom.global.add.noftz.f16"));
    }
    let k = atomics_kernel(64, 128, true);
    assert!(compile(&k, Target::Sm80).is_err());
    let c = compile(&k, Target::Sm90a).unwrap();
    assert!(c.ptx.contains("atom.global.add.noftz.bf16"));
    assemble("atomics_bf16", &c.ptx, "sm_90a");
}

#[test]
fn online_softmax_assembles_without_spills() {
    let b = build(&softmax_online(256, 4096));
    no_spills(&b);
}

//! `annotate_layout`: a shared buffer's user-chosen layout (row-major,
//! padded rows, XOR swizzle) replaces the one layout inference picks, in a
//! 3-stage pipelined tensor-core gemm (and a transposed-A bf16 one) run on
//! the Thread IR simulator against an f64 reference at sizes that are not
//! multiples of the tiles; and the annotation visibly changes the code
//! (shared size, XOR instructions) without changing the result.

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::*;
use tile_ir::print::parse_kernel;
use tile_ir::*;
use tile_testkit::{GEMM_TN_BF16, MATMUL};

#[test]
fn pipelined_matmul_with_each_annotation_matches_the_reference() {
    // a_s rows are 64 bytes (swizzle up to 2 bits), b_s rows 256 bytes.
    let cases = [
        ("row_major()", "row_major()"),
        ("padded(16)", "padded(32)"),
        ("swizzle(1)", "swizzle(3)"),
        ("swizzle(2)", "swizzle(1)"),
        ("padded(48)", "swizzle(2)"),
    ];
    for (a, b) in cases {
        let text = MATMUL.text_with_layouts(a, b);
        for (m, n, kk) in [(130, 129, 70), (70, 130, 33)] {
            check_gemm(&text, DType::F16, m, n, kk, false, false, &[m as i64, kk as i64, n as i64], 2e-3);
        }
    }
}

#[test]
fn transposed_a_bf16_with_annotations_matches_the_reference() {
    // 128-byte rows: swizzle(3) is CuTe's Swizzle<3,4,3>.
    for (a, b) in [("swizzle(3)", "padded(16)"), ("row_major()", "swizzle(2)"), ("padded(32)", "row_major()")] {
        let text = GEMM_TN_BF16.text_with_layouts(a, b);
        for (m, n, kk) in [(100, 70, 150), (65, 64, 31)] {
            check_gemm(&text, DType::BF16, m, n, kk, true, false, &[kk as i64, m as i64, n as i64], 1e-2);
        }
    }
}

/// Compiled for sm_80 without epilogue staging, so that the shared memory is
/// the pipelined operands' alone (the scratch tile would add to it), and
/// with `div.s32` for the folded grid's divisions (the multiply by the
/// launch's magic number has XORs of its own: these tests count the
/// swizzle's).
fn compiled(text: &str) -> Compiled {
    let k = parse_kernel(text).unwrap_or_else(|e| panic!("parse: {e:?}"));
    let options = CompileOptions { stage_epilogues: false, fast_divisors: false, ..CompileOptions::default() };
    compile_with(&k, Target::Sm80, options).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name))
}

#[test]
fn annotation_changes_the_code() {
    let chosen = compiled(&MATMUL.text_with_layouts("", ""));
    let plain = compiled(&MATMUL.text_with_layouts("row_major()", "row_major()"));
    let padded = compiled(&MATMUL.text_with_layouts("padded(16)", "padded(16)"));
    let xors = |c: &Compiled| c.ptx.matches("xor.b32").count();
    // Inference swizzles both operands; row-major has no XOR at all.
    assert!(xors(&chosen) > 0, "inferred layouts should be swizzled");
    assert_eq!(xors(&plain), 0, "row_major() operands must not be swizzled:\n{}", plain.ptx);
    assert_ne!(chosen.ptx, plain.ptx);
    // Shared size: 3 stages × (a_s + b_s), each stage 128-byte aligned.
    let stage = |bytes: i64| (bytes + 127) / 128 * 128;
    assert_eq!(plain.shared_bytes as i64, 3 * (stage(128 * 64) + stage(32 * 256)));
    assert_eq!(padded.shared_bytes as i64, 3 * (stage(128 * 80) + stage(32 * 272)));
    // The plan reports the user's layout.
    let desc = |c: &Compiled, name: &str| {
        c.layouts.iter().find(|(n, _)| n == name).map(|(_, d)| d.clone()).unwrap_or_default()
    };
    assert!(desc(&padded, "a_s").contains("row_bytes=80"), "{:?}", padded.layouts);
    let swz = compiled(&MATMUL.text_with_layouts("swizzle(1)", "swizzle(3)"));
    assert!(desc(&swz, "a_s").starts_with("shared swizzle<1,4,2>"), "{:?}", swz.layouts);
    assert!(desc(&swz, "b_s").starts_with("shared swizzle<3,4,4>"), "{:?}", swz.layouts);
    assert_ne!(swz.ptx, chosen.ptx);
}

#[test]
fn bad_annotations_are_compile_errors() {
    let err = |text: String| -> String {
        let k = parse_kernel(&text).unwrap_or_else(|e| panic!("parse: {e:?}"));
        match compile(&k, Target::Sm80) {
            Ok(_) => panic!("compiled:\n{text}"),
            Err(es) => es.iter().map(|e| e.message.clone()).collect::<Vec<_>>().join("\n"),
        }
    };
    let e = err(MATMUL.text_with_layouts("swizzle(3)", ""));
    assert!(
        e.contains("`swizzle(3)` needs rows of a power of two of at least 128 bytes") && e.contains("64 bytes"),
        "{e}"
    );
    let e = err(MATMUL.text_with_layouts("padded(8)", ""));
    assert!(e.contains("positive multiple of 16"), "{e}");
    let e = err(MATMUL.text_with_layouts("", "swizzle(4)"));
    assert!(e.contains("must be 1, 2 or 3"), "{e}");
    let e = err(MATMUL.text().replace("@5 acc: fragment f32", "@5 acc: fragment(row_major()) f32"));
    assert!(e.contains("only shared buffers have a layout"), "{e}");
}

#[test]
fn annotation_prints_and_parses_back() {
    let k = parse_kernel(&MATMUL.text_with_layouts("padded(16)", "swizzle(3)")).unwrap();
    assert_eq!(k.buffers[3].layout, Some(SharedLayoutSpec::Padded { bytes: 16 }));
    assert_eq!(k.buffers[4].layout, Some(SharedLayoutSpec::Swizzle { bits: 3 }));
    let text = tile_ir::print::print_kernel(&k);
    assert!(text.contains("a_s: shared(padded(16)) f16[128, 32]"), "{text}");
    assert_eq!(parse_kernel(&text).unwrap(), k);
    let json = serde_json::to_string(&k).unwrap();
    let back: Kernel = serde_json::from_str(&json).unwrap();
    assert_eq!(back, k);
    assert!(parse_kernel(&MATMUL.text_with_layouts("diagonal(2)", "")).is_err());
}

#[test]
fn annotated_kernels_assemble_on_both_targets() {
    for (a, b) in [("row_major()", "padded(16)"), ("swizzle(2)", "swizzle(3)")] {
        let k = parse_kernel(&MATMUL.text_with_layouts(a, b)).unwrap();
        for (target, arch) in [(Target::Sm80, "sm_80"), (Target::Sm90a, "sm_90a")] {
            let c = compile(&k, target).unwrap_or_else(|e| panic!("compile ({a}, {b}) {arch}: {e:?}"));
            // None when ptxas is absent (the `ptxas` module says so; `CI` makes that a failure).
            if let Some(report) = ptxas::assemble(&k.name, &c.ptx, arch) {
                assert!(report.contains("0 bytes spill stores"), "({a}, {b}) {arch} spills:\n{report}");
            }
        }
    }
}

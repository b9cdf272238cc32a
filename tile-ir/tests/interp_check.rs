//! The interpreter's check mode (`interp::Options::check`): reads of
//! never-written shared, fragment and local elements, per block, by every
//! kind of read (element loads, copies, reductions, gemm); out-of-bounds
//! accesses with the statement; the source line when the kernel has one.

use tile_ir::interp::{launch_with, Arg, Options, TensorData};
use tile_ir::print::parse_kernel;
use tile_ir::*;

fn run(text: &str, n: usize, check: bool) -> Result<Vec<f32>, String> {
    let k = parse_kernel(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    run_kernel(&k, n, check)
}

fn run_kernel(k: &Kernel, n: usize, check: bool) -> Result<Vec<f32>, String> {
    let x: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut y = vec![0u8; n * 4];
    let mut args = vec![
        Arg::Tensor { data: TensorData::Ro(&x), shape: vec![n] },
        Arg::Tensor { data: TensorData::Rw(&mut y), shape: vec![n] },
    ];
    launch_with(k, &mut args, Options { check }).map_err(|e| e.to_string())?;
    Ok(y.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
}

const HEADER: &str =
    "kernel k<%0 N>(@0 x: &f32[N], @1 y: &mut f32[N]) threads=32 grid=((N + (32 - 1)) / 32, 1, 1) {\n  %1 bx = block_idx.x\n";

/// The element at index 5 of a local buffer is written only in block 0:
/// block 1 reads a stale value in plain mode (the interpreter zeroes it) and
/// is caught in check mode, per block.
#[test]
fn uninitialized_local_element_per_block() {
    let text = format!("{HEADER}  @2 l: local f32[8]\n  if bx == 0 {{\n    l[5] = 1.0f32\n  }}\n  y[bx] = l[5]\n}}\n");
    assert!(run(&text, 64, false).is_ok());
    let e = run(&text, 64, true).unwrap_err();
    assert!(e.contains("block (1, 0, 0)"), "{e}");
    assert!(e.contains("in `y[bx] = l[5]`"), "the statement's text without a source line: {e}");
    assert!(e.contains("read of local buffer `l` at [5], which this block has not written"), "{e}");
}

/// Tile ops read whole buffers: a copy out of a shared buffer half written,
/// a reduction of an unwritten fragment, a gemm accumulating into an
/// uncleared accumulator.
#[test]
fn tile_ops_read_whole_buffers() {
    let copy_half = format!(
        "{HEADER}  @2 s: shared f32[32]\n  for %2 i in parallel 0..16 {{\n    s[i] = 1.0f32\n  }}\n  copy s -> y[bx * 32]\n}}\n"
    );
    let e = run(&copy_half, 32, true).unwrap_err();
    assert!(e.contains("read of shared buffer `s` at [16]") && e.contains("in `copy s -> y[bx * 32]`"), "{e}");

    let reduce = format!("{HEADER}  @2 f: fragment f32[32]\n  @3 r: fragment f32[1]\n  reduce.sum f -> r, dim=0\n  for %2 i in parallel 0..1 {{\n    y[bx] = r[i]\n  }}\n}}\n");
    let e = run(&reduce, 32, true).unwrap_err();
    assert!(e.contains("read of fragment `f` at [0]"), "{e}");

    let gemm = "kernel g(@0 a: &f16[16, 16], @1 c: &mut f32[16, 16]) threads=32 grid=(1, 1, 1) {\n  @2 a_s: shared f16[16, 16]\n  @3 b_s: shared f16[16, 16]\n  @4 acc: fragment f32[16, 16]\n  copy a[0, 0] -> a_s\n  copy a[0, 0] -> b_s\n  gemm a_s, b_s -> acc\n  copy acc -> c[0, 0]\n}\n";
    let k = parse_kernel(gemm).unwrap();
    let a = vec![0u8; 16 * 16 * 2];
    let mut c = vec![0u8; 16 * 16 * 4];
    let mut args = vec![
        Arg::Tensor { data: TensorData::Ro(&a), shape: vec![16, 16] },
        Arg::Tensor { data: TensorData::Rw(&mut c), shape: vec![16, 16] },
    ];
    let e = launch_with(&k, &mut args, Options { check: true }).unwrap_err().to_string();
    assert!(e.contains("read of fragment `acc` at [0, 0]") && e.contains("in `gemm a_s, b_s -> acc`"), "{e}");
    let cleared = gemm.replace("gemm a_s, b_s -> acc", "gemm a_s, b_s -> acc, clear");
    let k = parse_kernel(&cleared).unwrap();
    let mut args = vec![
        Arg::Tensor { data: TensorData::Ro(&a), shape: vec![16, 16] },
        Arg::Tensor { data: TensorData::Rw(&mut c), shape: vec![16, 16] },
    ];
    launch_with(&k, &mut args, Options { check: true }).unwrap();
}

/// An out-of-bounds shared write names the statement, its source line when
/// the kernel carries one, the indices and the block; the same kernel
/// without the bug runs the same in both modes.
#[test]
fn out_of_bounds_write_with_source_line() {
    let text = format!(
        "{HEADER}  @2 s: shared f32[32]\n  for %2 i in parallel 0..32 {{\n    s[i + bx] = x[bx * 32 + i]\n  }}\n  copy s -> y[bx * 32]\n}}\n"
    );
    let mut k = parse_kernel(&text).unwrap();
    // Span ids index `source.lines`: put the store (span 1) on line 12 of `k.rs`.
    match &mut k.body[0].kind {
        StmtKind::For { body, .. } => body[0].span = SpanId(1),
        other => panic!("{other:?}"),
    }
    k.source = Some(SourceMap { file: "src/k.rs".into(), lines: vec![3, 12] });
    assert!(run_kernel(&k, 32, true).is_ok(), "block 0 stays in bounds");
    let e = run_kernel(&k, 64, true).unwrap_err();
    assert!(e.contains("block (1, 0, 0)"), "{e}");
    assert!(e.contains("at src/k.rs:12 (`s[i + bx] = x[bx * 32 + i]`)"), "{e}");
    assert!(e.contains("index [32] is out of bounds for shared buffer `s` of shape [32]"), "{e}");
    let fixed = text.replace("s[i + bx]", "s[i]");
    assert_eq!(run(&fixed, 64, true).unwrap(), run(&fixed, 64, false).unwrap());
}

//! Reductions sharing one cross-warp scratch region (`Lx::reduce_scratch`):
//! two reductions of one fragment (max, then sum, the warps splitting the
//! reduced dim) on the simulator against references, both targets; the
//! barrier that orders the second reduction's writes after the first's reads
//! of the shared bytes is needed (a planted bug without it is a race the
//! simulator reports); and the scratch is sized once, for the largest.

mod sim;

use sim::RunOptions;
use tile_ir::print::parse_kernel;
use tile_ir::thread_ir::{Inst, Region, Stmt};
use tile_ir::*;
use tile_testkit::Rng;

const TWO_REDUCTIONS: &str = "kernel two_reductions<%0 M>(@0 x: &f32[M, 256], @1 mx: &mut f32[M], @2 sm: &mut f32[M]) threads=128 grid=((M + 3) / 4, 1, 1) {
  %1 bx = block_idx.x
  @3 t: fragment f32[4, 256]
  @4 m: fragment f32[4]
  @5 s: fragment f32[4]
  copy x[bx * 4, 0] -> t
  reduce.max t -> m, dim=1
  reduce.sum t -> s, dim=1
  copy m -> mx[bx * 4]
  copy s -> sm[bx * 4]
}";

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn problem(m: usize) -> (Vec<sim::SimTensor>, Vec<f32>, Vec<f64>) {
    let mut rng = Rng(0xed ^ m as u64);
    let x: Vec<f32> = (0..m * 256).map(|_| rng.f32(-3.0, 3.0)).collect();
    let mx: Vec<f32> = (0..m).map(|i| x[i * 256..][..256].iter().cloned().fold(f32::NEG_INFINITY, f32::max)).collect();
    let sm: Vec<f64> = (0..m).map(|i| x[i * 256..][..256].iter().map(|v| *v as f64).sum()).collect();
    let t = |bytes: Vec<u8>, shape: Vec<usize>| sim::SimTensor { bytes, shape, elem: 4 };
    let tensors = vec![
        t(x.iter().flat_map(|v| v.to_le_bytes()).collect(), vec![m, 256]),
        t(vec![0xFF; 4 * m], vec![m]),
        t(vec![0xFF; 4 * m], vec![m]),
    ];
    (tensors, mx, sm)
}

/// The (region id, op) of every shared access in `s`, in order.
fn shared_accesses(s: &Stmt, out: &mut Vec<(bool, Region)>) {
    match s {
        Stmt::Inst { inst: Inst::St { region: Some(r), .. }, .. } => out.push((true, *r)),
        Stmt::Inst { inst: Inst::Ld { region: Some(r), .. }, .. } => out.push((false, *r)),
        Stmt::If { then, otherwise, .. } => then.iter().chain(otherwise).for_each(|x| shared_accesses(x, out)),
        Stmt::For { body, .. } => body.iter().for_each(|x| shared_accesses(x, out)),
        _ => {}
    }
}

#[test]
fn two_reductions_share_one_scratch() {
    let k = parse_kernel(TWO_REDUCTIONS).unwrap();
    for target in [Target::Sm80, Target::Sm90a] {
        let c = compile(&k, target).unwrap_or_else(|e| panic!("{e:?}"));
        // One region for both reductions' writes and reads.
        let mut acc = Vec::new();
        c.function.body.iter().for_each(|s| shared_accesses(s, &mut acc));
        let ids: std::collections::BTreeSet<u32> = acc.iter().map(|(_, r)| r.id).collect();
        let writes = acc.iter().filter(|(w, _)| *w).map(|(_, r)| r.op).collect::<std::collections::BTreeSet<_>>();
        assert_eq!((ids.len(), writes.len()), (1, 2), "{}: {acc:?}", target.name());
        // The bytes of one reduction's scratch (each with its own: twice).
        let one = parse_kernel(&TWO_REDUCTIONS.replace("  reduce.sum t -> s, dim=1\n", "  fill s, 0.0\n")).unwrap();
        let single = compile(&one, target).unwrap().shared_bytes;
        assert!(single > 0, "the warps split the reduced dim");
        assert_eq!(c.shared_bytes, single, "{}", target.name());
        for m in [1usize, 5, 8] {
            let (tensors, mx, sm) = problem(m);
            let out = sim::run_compiled(&c, &k, tensors, &[m as i64], &[], RunOptions::default()).tensors;
            assert_eq!(f32s(&out[1]), mx, "{} m={m}: max", target.name());
            for (g, w) in f32s(&out[2]).iter().zip(&sm) {
                assert!((*g as f64 - w).abs() <= 1e-4 * w.abs().max(1.0), "{} m={m}: sum {g} vs {w}", target.name());
            }
        }
    }
}

/// Without the barrier between the first reduction's reads of the scratch
/// and the second's writes of the same bytes, the simulator reports a race.
#[test]
fn dropping_the_barrier_between_two_reductions_is_a_race() {
    let k = parse_kernel(TWO_REDUCTIONS).unwrap();
    let c = compile(&k, Target::Sm80).unwrap();
    let mut f = c.function.clone();
    // The top-level statements: the last one reading the first reduction's
    // slots, then the first one writing the second's; the barriers between.
    let accesses: Vec<Vec<(bool, Region)>> = f
        .body
        .iter()
        .map(|s| {
            let mut a = Vec::new();
            shared_accesses(s, &mut a);
            a
        })
        .collect();
    let first_write_op = accesses.iter().flatten().find(|(w, _)| *w).map(|(_, r)| r.op).unwrap();
    let second_write = accesses.iter().position(|a| a.iter().any(|(w, r)| *w && r.op != first_write_op)).unwrap();
    let last_read = accesses[..second_write].iter().rposition(|a| a.iter().any(|(w, _)| !*w)).unwrap();
    let between: Vec<usize> = (last_read + 1..second_write)
        .filter(|&i| matches!(f.body[i], Stmt::Inst { inst: Inst::BarSync, .. }))
        .collect();
    assert_eq!(between.len(), 1, "one barrier orders the reuse");
    f.body.remove(between[0]);
    let (tensors, _, _) = problem(4);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sim::run_function(&f, &k, tensors, &[4], &[], RunOptions::default());
    }));
    let e = run.expect_err("the planted bug ran without complaint");
    let msg = e
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("no synchronization"), "{msg}");
}

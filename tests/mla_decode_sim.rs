//! MLA decode's compiled sm_90a kernels (`examples/kernels/mla_decode.rs`)
//! on the Thread IR simulator (`tile-ir/tests/sim`), no GPU needed: the
//! device scheduler `mla_metadata` (against the host `schedule`), the paged
//! split kernel in each of its sm_90a schedules that ran on the H200
//! (`warp_specialized_loop`, `tma_copy`, and the persistent loop over fewer
//! blocks than tiles; races and bounds checked) and the
//! combine kernel, chained as `forward` chains them, on a schedule of many
//! SM parts: a long sequence cut into one-block chunks merged by the
//! combine, a one-key sequence, an empty one, and most chunks unused
//! (batch −1); scores that jump from key block to key block (O
//! rescaled at every block) through the warp-specialized loop; and the
//! split kernel in clusters of two row blocks (the KV multicast). The outputs
//! are checked on every row against the f64 reference (`Inputs::check`),
//! the simulated kernels starting from the
//! interpreter's inputs (pages shuffled, unused cache rows NaN, outputs
//! poisoned). The kernels are compiled here from their embedded Tile IR
//! (`KernelMeta::ir`) with the default options, and must give the PTX they
//! embed.
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/mla_halves.rs"]
mod halves;
#[path = "../examples/kernels/mla_decode.rs"]
mod mla;
#[path = "../tile-ir/tests/ptxas/mod.rs"]
mod ptxas;
#[path = "../tile-ir/tests/sim/mod.rs"]
mod sim;

use mla::{Case, Inputs};
use sim::SimTensor;
use tile::ir::{CompileOptions, Compiled, Kernel, Target};
use tile::prelude::*;

/// A kernel's embedded Tile IR and its sm_90a variants, checked against the
/// PTX `meta` embeds.
fn compiled(meta: &tile::KernelMeta) -> (Kernel, Vec<Compiled>) {
    let k: Kernel = serde_json::from_str(meta.ir).expect("embedded Tile IR parses");
    let v = tile::ir::compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
    let embedded: Vec<&str> = meta.targets.iter().filter(|t| t.arch == "sm_90a").map(|t| t.ptx).collect();
    assert_eq!(v.iter().map(|c| c.ptx.as_str()).collect::<Vec<_>>(), embedded, "{}: other PTX than embedded", k.name);
    (k, v)
}

/// The values of `k`'s dims, by name.
fn dims(k: &Kernel, value: &dyn Fn(&str) -> usize) -> Vec<i64> {
    k.dims.iter().map(|&d| value(&k.var(d).name) as i64).collect()
}

fn i32_bytes(x: &[i32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn f16_bytes(x: &[f16]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect()
}

fn from_bytes<T>(b: &[u8], f: fn([u8; 4]) -> T) -> Vec<T> {
    b.chunks(4).map(|c| f([c[0], c[1], c[2], c[3]])).collect()
}

fn tensor(bytes: Vec<u8>, shape: &[usize], elem: usize) -> SimTensor {
    SimTensor { bytes, shape: shape.to_vec(), elem }
}

/// Metadata, split (its `schedule` variant) and combine of `c` on the
/// simulator, on the inputs of `seed`; checks every row.
fn run(c: &Case, seed: u64, schedule: &str) {
    run_on(c, seed, schedule, None, None)
}

/// Hopper's paged split instance, in clusters of `cl` blocks (1: none).
fn split_meta(cl: usize) -> &'static tile::KernelMeta {
    match cl {
        1 => mla::mla_split_paged_sm90::meta::<f16, 256, 2, 1>(),
        _ => mla::mla_split_paged_sm90::meta::<f16, 256, 2, 2>(),
    }
}

/// [`run`] with the split kernel launched on `blocks` blocks (a persistent
/// variant's; `None`: the grid), key `j` of batch `b` scaled by
/// `keys(b, j)` (`Inputs::scale_keys`; `None`: as drawn).
fn run_on(c: &Case, seed: u64, schedule: &str, blocks: Option<u32>, keys: Option<&dyn Fn(usize, usize) -> f64>) {
    let opts = sim::RunOptions { shape: blocks.map(|n| [n, 1, 1]), ..Default::default() };
    run_split(c, seed, (schedule, split_meta(1)), opts, keys)
}

/// [`run_on`] with the split instance `split` (any of the paged ones: the
/// same parameters).
fn run_split(
    c: &Case,
    seed: u64,
    split: (&str, &'static tile::KernelMeta),
    opts: sim::RunOptions,
    keys: Option<&dyn Fn(usize, usize) -> f64>,
) {
    run_split_with(c, seed, split, CompileOptions::default(), opts, keys)
}

/// [`run_split`] with the split kernel compiled with `options`.
fn run_split_with(
    c: &Case,
    seed: u64,
    (schedule, split): (&str, &'static tile::KernelMeta),
    options: CompileOptions,
    opts: sim::RunOptions,
    keys: Option<&dyn Fn(usize, usize) -> f64>,
) {
    let st = Device::interpreter().stream().unwrap();
    let mut x = Inputs::<f16>::new(&st, c, seed).unwrap();
    if let Some(f) = keys {
        x.scale_keys(&st, f).unwrap();
    }
    let (b, s_q, h_q) = (c.b(), c.s_q, c.h_q);
    let nc = b + c.num_parts;
    let rp = (s_q * h_q).div_ceil(64) * 64;
    let prows = nc * rp;
    let (maxb, nblk) = (x.block_table.shape()[1], x.cache.shape()[0]);
    let dim = |name: &str| match name {
        "B" => b,
        "B1" => b + 1,
        "NC" => nc,
        "SQ" => s_q,
        "H" => h_q,
        "NBLK" => nblk,
        "MAXB" => maxb,
        "PROWS" => prows,
        "RQ" => s_q * h_q,
        other => panic!("dim {other}"),
    };
    let seqlens = i32_bytes(&c.seqlens);

    let (k, v) = compiled(&mla::mla_metadata::META);
    let t = vec![
        tensor(seqlens.clone(), &[b], 4),
        tensor(vec![0xAB; nc * 16], &[nc, 4], 4),
        tensor(vec![0xAB; (b + 1) * 4], &[b + 1], 4),
        tensor(vec![0xAB; nc * 4], &[nc], 4),
    ];
    let out = sim::run_compiled(&v[0], &k, t, &dims(&k, &dim), &[1], Default::default()).tensors;
    let (chunks, begin) = (from_bytes(&out[1], i32::from_le_bytes), from_bytes(&out[2], i32::from_le_bytes));
    let order = from_bytes(&out[3], i32::from_le_bytes);
    let (host_chunks, host_begin) = mla::schedule(&c.seqlens, c.num_parts);
    assert_eq!(chunks, host_chunks.iter().flatten().copied().collect::<Vec<_>>(), "{c:?}: device chunks");
    assert_eq!(begin, host_begin, "{c:?}: device chunk_begin");
    assert_eq!(order, mla::tile_order(&host_chunks), "{c:?}: device order");

    let (k, mut v) = compiled(split);
    if options != CompileOptions::default() {
        v = tile::ir::compile_variants(&k, Target::Sm90a, options).unwrap();
    }
    let split = v.iter().find(|v| v.schedule == schedule).unwrap_or_else(|| panic!("no {schedule} variant"));
    let cache: Vec<f16> = x.cache.to_vec(&st).unwrap();
    let table: Vec<i32> = x.block_table.to_vec(&st).unwrap();
    let t = vec![
        tensor(f16_bytes(&x.q), &[b, s_q * h_q, 576], 2),
        tensor(f16_bytes(&cache), &[nblk, 64, 1, 576], 2),
        tensor(i32_bytes(&table), &[b, maxb], 4),
        tensor(seqlens, &[b], 4),
        tensor(i32_bytes(&chunks), &[nc, 4], 4),
        tensor(i32_bytes(&order), &[nc], 4),
        tensor(i32_bytes(&begin), &[b + 1], 4),
        tensor(vec![0xFF; prows * 512 * 4], &[prows, 512], 4),
        tensor(vec![0xFF; prows * 4], &[prows], 4),
        tensor(vec![0xFF; b * s_q * h_q * 512 * 4], &[b, s_q * h_q, 512], 4),
        tensor(vec![0xFF; b * h_q * s_q * 4], &[b, h_q, s_q], 4),
    ];
    let scale = (c.scale() * std::f32::consts::LOG2_E).to_bits() as u64;
    let mut out = sim::run_compiled(split, &k, t, &dims(&k, &dim), &[scale], opts).tensors;

    let (k, v) = compiled(&mla::mla_combine::META);
    // The split kernel wrote the batches in one chunk to out and lse; the
    // combine the others.
    let t = vec![
        tensor(std::mem::take(&mut out[7]), &[prows, 512], 4),
        tensor(std::mem::take(&mut out[8]), &[prows], 4),
        tensor(i32_bytes(&begin), &[b + 1], 4),
        tensor(std::mem::take(&mut out[9]), &[b, s_q, h_q, 512], 4),
        tensor(std::mem::take(&mut out[10]), &[b, h_q, s_q], 4),
    ];
    let out = sim::run_compiled(&v[0], &k, t, &dims(&k, &dim), &[], Default::default()).tensors;
    x.out = DeviceTensor::from_slice(&st, &from_bytes(&out[3], f32::from_le_bytes), &[b, s_q, h_q, 512]).unwrap();
    x.lse = DeviceTensor::from_slice(&st, &from_bytes(&out[4], f32::from_le_bytes), &[b, h_q, s_q]).unwrap();
    x.check(&st, c, None, 1e-3).unwrap_or_else(|e| panic!("{schedule}: {e}"));
}

/// 32 SM parts over seqlens 1, 0, 65 and 513: the 513 keys in nine
/// one-block chunks (the last with one key), 65 in two, 23 unused chunks.
fn many_parts() -> Case {
    Case { seqlens: vec![1, 0, 65, 513], s_q: 1, h_q: 16, paged: true, num_parts: 32 }
}

#[test]
fn many_parts_warp_specialized_loop() {
    run(&many_parts(), 13, "warp_specialized_loop");
}

/// The persistent variant (on by default) over 3 blocks: its dynamic tile
/// scheduler hands the chunks' tiles out one at a time.
#[test]
fn many_parts_warp_specialized_loop_persistent() {
    run_on(&many_parts(), 13, "warp_specialized_loop_persistent", Some(3), None);
}

/// Scores that jump from key block to key block (`mla_decode_interp`'s
/// `scores_that_jump`: key block `k` scaled by `1 + 8·(k mod 4)`, so O is
/// rescaled at every block) through the warp-specialized loop's code as the
/// H200 runs it, a 200-key sequence in one chunk and one split in two.
#[test]
fn scores_that_jump_warp_specialized_loop() {
    let c = Case { seqlens: vec![200, 130, 1], s_q: 2, h_q: 16, paged: true, num_parts: 4 };
    run_on(&c, 31, "warp_specialized_loop", None, Some(&mla::jumping_keys(true)));
}

/// The split kernel in clusters of two blocks (`MlaElement::paged(_, true)`:
/// the two row blocks of a chunk, 128 query rows): the warp-specialized
/// loop's rings are the same in both blocks (the page `block_table[(bi,
/// kb)]` of a batch `chunks[(order[by], 0)]`, inputs the kernel never
/// writes, no `bx`), so each block's producer loads 32 of the 64 rows of
/// every box and multicasts them to both, each stage is released by all
/// the cluster's consumer warps (remote arrivals, lane 0 after the last
/// gemm's wait), and each producer waits for the last releases before its
/// block exits. On the simulator the cluster's blocks run together
/// (multicasts landing in both, remote arrivals, races checked, each
/// block's shared addresses in its window of the cluster's, as on the GPU,
/// where wgmma descriptors that kept them read the wrong panels of V):
/// chunks of 0, 1, 2 and 4 key blocks, unused chunks (batch −1), partial
/// pages, under several interleavings, and scores that jump (O rescaled at
/// every block), against the f64 reference; and the TMA-copy variant in
/// the same launch. ptxas assembles the warp-specialized variants of both
/// cluster sizes (the unclustered persistent one, the GPU's default,
/// included): no serialized wgmmas, injected waits or spills.
#[test]
fn clusters_multicast_the_kv_warp_specialized_loop() {
    let (k, v) = compiled(split_meta(2));
    assert_eq!(k.cluster, [2, 1, 1]);
    let ws = v.iter().find(|v| v.schedule == "warp_specialized_loop").expect("a warp-specialized variant");
    for needle in [".multicast::cluster", "mapa.shared::cluster.u32", "barrier.cluster.wait.acquire.aligned"] {
        assert!(ws.ptx.contains(needle), "no `{needle}`");
    }
    // The KV's boxes ([page, 64 rows, 1, 64 columns], innermost first in
    // the map): 32 rows each block.
    let kv_boxes: Vec<&Vec<u32>> = ws.tensor_maps.iter().map(|m| &m.box_shape).filter(|b| b.len() == 4).collect();
    assert_eq!(kv_boxes, vec![&vec![1, 32, 1, 64]; 2], "{:?}", ws.tensor_maps);
    // No other variant multicasts (the cluster is only a launch shape there),
    // and the persistent one declines the cluster.
    assert!(v.iter().filter(|c| c.schedule != "warp_specialized_loop").all(|c| !c.ptx.contains("multicast")));
    assert!(v.iter().all(|c| c.schedule != "warp_specialized_loop_persistent"));
    // ptxas keeps its wgmma pipeline and registers as the unclustered
    // kernel's: no serialized wgmmas (C7514: a wait of every consumer
    // between warpgroup 0's two score gemms did that, at 0.61× the speed on
    // the H100), no injected waits, no spills; nor in the unclustered
    // kernel's warp-specialized variants, the persistent one (what the GPU
    // runs by default) included.
    for cl in [1, 2] {
        let (k, v) = compiled(split_meta(cl));
        let ws: Vec<_> = v.iter().filter(|v| v.schedule.starts_with("warp_specialized_loop")).collect();
        assert_eq!(ws.len(), if cl == 1 { 2 } else { 1 }, "{:?}", v.iter().map(|v| v.schedule).collect::<Vec<_>>());
        for ws in ws {
            if let Some(r) = ptxas::assemble(&k.name, &ws.ptx, "sm_90a") {
                let bad: Vec<&str> =
                    r.lines().filter(|l| l.contains("Performance Loss") || l.contains("is injected")).collect();
                assert!(bad.is_empty(), "{} ({}):\n{}", k.name, ws.schedule, bad.join("\n"));
                assert!(r.contains("0 bytes spill stores"), "{r}");
            }
        }
    }
    let c = Case { seqlens: vec![1, 0, 65, 200], s_q: 2, h_q: 64, paged: true, num_parts: 4 };
    // Each warp until it blocks, then random interleavings (the blocks of a
    // cluster finishing in either order).
    for seed in [None, Some(1)] {
        let opts = sim::RunOptions { seed, ..Default::default() };
        run_split(&c, 5, ("warp_specialized_loop", split_meta(2)), opts, None);
    }
    run_split(&c, 6, ("warp_specialized_loop", split_meta(2)), Default::default(), Some(&mla::jumping_keys(true)));
    // The TMA-copy variant in the same cluster launch (no multicast): the
    // rank-1 block's own shared addresses carry its rank, which its wgmma
    // descriptors must not (V, an MN-major B, read through LBO).
    run_split(&c, 7, ("tma_copy", split_meta(2)), Default::default(), None);
}

/// ptxas (when found) assembles `ptx`, kernel `name` built as `what`,
/// without serialized wgmmas, injected waits or spills.
fn assembles_clean(name: &str, ptx: &str, what: &str) {
    if let Some(r) = ptxas::assemble(name, ptx, "sm_90a") {
        let bad: Vec<&str> =
            r.lines().filter(|l| l.contains("Performance Loss") || l.contains("is injected")).collect();
        assert!(bad.is_empty(), "{name} ({what}):\n{}", bad.join("\n"));
        assert!(r.contains("0 bytes spill stores"), "{r}");
    }
}

/// The seesaw's cases on the simulator, its split kernel compiled with
/// `options`: many parts; s_q 2 over h_q 64 (the causal mask inside the
/// last block) in order and under a random interleaving; then `jumping`
/// with scores that jump at every block, once per interleaving of `seeds`.
fn seesaw_cases(meta: &'static tile::KernelMeta, options: CompileOptions, jumping: &Case, seeds: &[Option<u64>]) {
    run_split_with(&many_parts(), 13, ("warp_specialized_loop", meta), options, Default::default(), None);
    let c = Case { seqlens: vec![1, 0, 65, 200], s_q: 2, h_q: 64, paged: true, num_parts: 4 };
    for seed in [None, Some(3)] {
        let opts = sim::RunOptions { seed, ..Default::default() };
        run_split_with(&c, 5, ("warp_specialized_loop", meta), options, opts, None);
    }
    for &seed in seeds {
        let opts = sim::RunOptions { seed, ..Default::default() };
        run_split_with(jumping, 31, ("warp_specialized_loop", meta), options, opts, Some(&mla::jumping_keys(true)));
    }
}

/// The seesaw split kernel (`mla_split_seesaw`: two key blocks per
/// iteration in one-stage rings of their own, block 0's softmax on
/// warpgroup 0 and block 1's on warpgroup 1 under block 0's P·V, whose
/// wait and ring release are deferred to the rescale before block 1's, the
/// reference maximum and the rescales handed between them in shared
/// memory) in its warp-specialized
/// variant (the persistent one declines one-stage rings): chunks of 1 (an odd count: the last block
/// loaded twice and the copy masked), 2 and 9 blocks, empty and unused
/// chunks, partial pages; s_q 2 over h_q 64 (the causal mask inside the
/// last block); scores that jump at every block (O and both warpgroups'
/// sums rescaled each block), each warp until it blocks and under random
/// interleavings. ptxas assembles it without serialized wgmmas, injected
/// waits or spills (its accumulators' registers shared by the two
/// warpgroups' scores: their gemms' waits run by every thread).
#[test]
fn seesaw_warp_specialized_loop() {
    let meta = mla::mla_split_seesaw::meta::<f16, 256>();
    let (k, v) = compiled(meta);
    let ws: Vec<_> = v.iter().filter(|v| v.schedule.starts_with("warp_specialized_loop")).collect();
    assert_eq!(ws.len(), 1, "{:?}", v.iter().map(|v| v.schedule).collect::<Vec<_>>());
    assembles_clean(&k.name, &ws[0].ptx, ws[0].schedule);
    let c = Case { seqlens: vec![200, 130, 1], s_q: 2, h_q: 16, paged: true, num_parts: 4 };
    seesaw_cases(meta, CompileOptions::default(), &c, &[None]);
}

/// The consumers that read a stage after the other warpgroup's scores
/// (`wsloop_ordered_observers`, `observers.rs`): in the seesaw each
/// warpgroup skips its waits for the other block's 9 pieces (8 boxes of K,
/// K_pe), which the barriers order for it (block 0's: the `barrier()`
/// after its scores; block 1's: O's rescale after warpgroup 1's `alpha1_s`),
/// and the simulator (races against the TMA's bytes through
/// happens-before, barriers included) finds none; the plain kernel's
/// warpgroup 1, idle until P, keeps its waits (the same PTX with the
/// option off).
#[test]
fn seesaw_observers_skip_ordered_waits() {
    let waits = |ptx: &str| ptx.matches("mbarrier.try_wait").count();
    let off = CompileOptions::default().with_off("wsloop_ordered_observers").unwrap();
    let meta = mla::mla_split_seesaw::meta::<f16, 256>();
    let (k, v) = compiled(meta);
    let w = tile::ir::compile_variants(&k, Target::Sm90a, off).unwrap();
    let ws = |v: &[Compiled]| v.iter().find(|c| c.schedule == "warp_specialized_loop").map(|c| c.ptx.clone()).unwrap();
    assert_eq!(waits(&ws(&w)) - waits(&ws(&v)), 18, "{}: each warpgroup skips the other block's 9 pieces", k.name);
    let c = Case { seqlens: vec![200, 130, 1], s_q: 2, h_q: 16, paged: true, num_parts: 4 };
    seesaw_cases(meta, off, &c, &[]);
    let (k, v) = compiled(split_meta(1));
    let w = tile::ir::compile_variants(&k, Target::Sm90a, off).unwrap();
    assert!(v.iter().zip(&w).all(|(a, b)| a.ptx == b.ptx), "{}: the plain kernel's waits changed", k.name);
}

/// The seesaw with block 1's P·V issued right behind block 0's
/// (`wsloop_guarded_waits`, an experiment until timed): O's rescale between
/// them waits for block 0's only under a vote of the warpgroup (taken at the
/// jumping keys, where block 1 moves the rows' maximum, skipped elsewhere),
/// and block 0's rings are released once only block 1's group is in flight.
/// ptxas assembles it without serialized wgmmas, injected waits or spills;
/// the default build has none of it.
#[test]
fn seesaw_guarded_waits_warp_specialized_loop() {
    let meta = mla::mla_split_seesaw::meta::<f16, 256>();
    let (k, v) = compiled(meta);
    let on = CompileOptions::default().with_on("wsloop_guarded_waits").unwrap();
    let g = tile::ir::compile_variants(&k, Target::Sm90a, on).unwrap();
    let behind = |ptx: &str| ptx.contains("bar.red.or.pred") && ptx.contains("wgmma.wait_group.sync.aligned 1;");
    assert!(v.iter().all(|c| !behind(&c.ptx)), "{}: the default issues P·V behind the other", k.name);
    let ws = g.iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant");
    assert!(behind(&ws.ptx), "{}: no P·V issued behind the other", k.name);
    assembles_clean(&k.name, &ws.ptx, "guarded waits");
    let c = Case { seqlens: vec![200, 130, 1], s_q: 2, h_q: 16, paged: true, num_parts: 4 };
    for seed in [None, Some(7)] {
        let opts = sim::RunOptions { seed, ..Default::default() };
        run_split_with(&c, 31, ("warp_specialized_loop", meta), on, opts, Some(&mla::jumping_keys(true)));
    }
    let c = Case { seqlens: vec![1, 0, 65, 200], s_q: 2, h_q: 64, paged: true, num_parts: 4 };
    run_split_with(&c, 5, ("warp_specialized_loop", meta), on, Default::default(), None);
}

/// The seesaw with warpgroup 0's scores of the next iteration issued at the
/// end of this one, behind block 1's P·V (`wsloop_rotate_scores`, an
/// experiment): the loop's top issues them only in its first
/// iteration, and the end of each keeps their two groups in flight
/// (`wgmma.wait_group 2`) while retiring P·V's. Loops of 0, 1 and 2
/// iterations (chunks of 1, 2, 3 and 9 blocks, empty ones), masked last
/// blocks, jumping keys, random interleavings; ptxas assembles it without
/// serialized wgmmas, injected waits or spills; the default build has none
/// of it.
#[test]
fn seesaw_rotated_scores_warp_specialized_loop() {
    let meta = mla::mla_split_seesaw::meta::<f16, 256>();
    let (k, v) = compiled(meta);
    let on = CompileOptions::default().with_on("wsloop_rotate_scores").unwrap();
    let g = tile::ir::compile_variants(&k, Target::Sm90a, on).unwrap();
    let rotated = |ptx: &str| ptx.contains("wgmma.wait_group.sync.aligned 2;");
    assert!(v.iter().all(|c| !rotated(&c.ptx)), "{}: the default rotates the scores", k.name);
    let ws = g.iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant");
    assert!(rotated(&ws.ptx), "{}: the scores are not issued a turn early", k.name);
    assembles_clean(&k.name, &ws.ptx, "rotated scores");
    let c = Case { seqlens: vec![200, 130, 1, 320], s_q: 2, h_q: 16, paged: true, num_parts: 6 };
    seesaw_cases(meta, on, &c, &[None, Some(7)]);
    // The plain kernel's warp-specialized variants open with warpgroup 0's
    // scores too; the persistent one (the chain's issue carried across its
    // tiles) as well.
    plain_cases(on, &|name, schedule, ptx| {
        assert!(rotated(ptx), "{name} ({schedule}): the scores are not issued a turn early")
    });
}

/// The plain kernel's warp-specialized variants compiled with `options`,
/// each checked by `check` (its name, schedule and PTX), assembled by
/// ptxas without serialized wgmmas, injected waits or spills, and run on
/// the simulator: many parts and jumping keys, in order and under a random
/// interleaving; the persistent one over 3 blocks (tiles of 0, 1 and more
/// iterations one after another on a block, the rings carried across them).
fn plain_cases(options: CompileOptions, check: &dyn Fn(&str, &str, &str)) {
    let plain = split_meta(1);
    let (k, _) = compiled(plain);
    let g = tile::ir::compile_variants(&k, Target::Sm90a, options).unwrap();
    let c = Case { seqlens: vec![200, 130, 1, 320], s_q: 2, h_q: 16, paged: true, num_parts: 6 };
    for schedule in ["warp_specialized_loop", "warp_specialized_loop_persistent"] {
        let ws = g.iter().find(|c| c.schedule == schedule).expect("a warp-specialized variant");
        check(&k.name, schedule, &ws.ptx);
        assembles_clean(&k.name, &ws.ptx, schedule);
        let blocks = (schedule == "warp_specialized_loop_persistent").then_some([3, 1, 1]);
        for seed in [None, Some(11)] {
            let opts = sim::RunOptions { seed, shape: blocks, ..Default::default() };
            run_split_with(&many_parts(), 13, (schedule, plain), options, opts, None);
        }
        let opts = sim::RunOptions { shape: blocks, ..Default::default() };
        run_split_with(&c, 31, (schedule, plain), options, opts, Some(&mla::jumping_keys(true)));
    }
}

/// The seesaw with each 64-column box of block 0's and block 1's K released
/// on its own barrier by each warpgroup after its last statement touching it
/// (`wsloop_piece_releases`, an experiment): warpgroup 0 frees
/// the boxes of V's left half once its half of P·V is done, warpgroup 1
/// those of the right half, and each the other half's after the masking of
/// the keys past the sequence; the producer refills box by box. Alone and
/// with the scores rotated (their chain then cut around block 1's release,
/// `rotate.rs`); masked last blocks, jumping keys, random
/// interleavings; ptxas assembles it without serialized wgmmas, injected
/// waits or spills; the default build has none of it.
#[test]
fn seesaw_piece_releases_warp_specialized_loop() {
    let meta = mla::mla_split_seesaw::meta::<f16, 256>();
    let (k, v) = compiled(meta);
    let inits = |ptx: &str| ptx.matches("mbarrier.init").count();
    let ws = v.iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant");
    for spec in ["wsloop_piece_releases", "wsloop_piece_releases,wsloop_rotate_scores"] {
        let on = CompileOptions::default().with_on(spec).unwrap();
        let g = tile::ir::compile_variants(&k, Target::Sm90a, on).unwrap();
        let pr = g.iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant");
        // K of both blocks: eight boxes, one stage each.
        assert_eq!(inits(&pr.ptx), inits(&ws.ptx) + 16, "{}: no per-box empty barriers ({spec})", k.name);
        // Rotated, the next scores are cut around block 1's release: its
        // P·V retired by `wait_group 1` (the first part's group in flight).
        let cut = pr.ptx.contains("wgmma.wait_group.sync.aligned 1;");
        assert_eq!(cut, spec.contains("rotate"), "{}: the chain's cut ({spec})", k.name);
        assembles_clean(&k.name, &pr.ptx, spec);
        let c = Case { seqlens: vec![200, 130, 1, 320], s_q: 2, h_q: 16, paged: true, num_parts: 6 };
        seesaw_cases(meta, on, &c, &[Some(9)]);
    }
}

/// A barrier one warpgroup need not wait at becomes its arrival
/// (`wsloop_arrivals`, an experiment): in the seesaw, warpgroup 0 hands
/// P₀ over and issues its half of P·V₀ without waiting for warpgroup 1's
/// maximum, warpgroup 1 hands P₁ over likewise (two `barrier.arrive`s, the
/// zeroing of the keys past the sequence fenced by barriers of its own in
/// its branch); in the plain kernel warpgroup 0 hands P over (one). Loops
/// of 0, 1 and 2 iterations, masked last blocks, jumping keys, random
/// interleavings on the simulator (which orders a `barrier.arrive`'s
/// earlier accesses only before the threads that wait at the barrier);
/// ptxas assembles them without serialized wgmmas, injected waits or
/// spills; the default build has none of it.
#[test]
fn arrivals_warp_specialized_loop() {
    let arrives = |ptx: &str| ptx.matches("barrier.arrive ").count();
    let on = CompileOptions::default().with_on("wsloop_arrivals").unwrap();
    let meta = mla::mla_split_seesaw::meta::<f16, 256>();
    let (k, v) = compiled(meta);
    assert!(v.iter().all(|c| arrives(&c.ptx) == 0), "{}: the default build arrives", k.name);
    let g = tile::ir::compile_variants(&k, Target::Sm90a, on).unwrap();
    let ws = g.iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant");
    assert_eq!(arrives(&ws.ptx), 2, "{}: P₀ and P₁ handed over", k.name);
    assembles_clean(&k.name, &ws.ptx, "arrivals");
    let c = Case { seqlens: vec![200, 130, 1, 320], s_q: 2, h_q: 16, paged: true, num_parts: 6 };
    seesaw_cases(meta, on, &c, &[None, Some(5)]);
    plain_cases(on, &|name, schedule, ptx| assert_eq!(arrives(ptx), 1, "{name} ({schedule}): P handed over"));
}

#[test]
fn many_parts_tma_copy() {
    run(&many_parts(), 13, "tma_copy");
}

/// The device scheduler alone on the simulator (races, bounds, barriers of
/// its shared-memory staging checked) against the host's `schedule`: b 1,
/// 129 (a partial segment), 1,030 (two segments of 1,024 batches), lengths
/// at the key-block edges, parts from 1 to more than there is work.
#[test]
fn metadata_at_awkward_sizes() {
    let (k, v) = compiled(&mla::mla_metadata::META);
    let edges = [0, 1, 63, 64, 65, 8191];
    for (b, parts) in [(1, 1), (1, 40), (129, 66), (129, 1), (1030, 66), (3, 132)] {
        let seqlens: Vec<i32> = (0..b).map(|i| edges[(i * 7 + b) % edges.len()]).collect();
        let nc = b + parts;
        let dim = |name: &str| match name {
            "B" => b,
            "B1" => b + 1,
            "NC" => nc,
            other => panic!("dim {other}"),
        };
        let t = vec![
            tensor(i32_bytes(&seqlens), &[b], 4),
            tensor(vec![0xAB; nc * 16], &[nc, 4], 4),
            tensor(vec![0xAB; (b + 1) * 4], &[b + 1], 4),
            tensor(vec![0xAB; nc * 4], &[nc], 4),
        ];
        let opts = sim::RunOptions { seed: Some(b as u64), ..Default::default() };
        let out = sim::run_compiled(&v[0], &k, t, &dims(&k, &dim), &[1], opts).tensors;
        let (host_chunks, host_begin) = mla::schedule(&seqlens, parts);
        let chunks = from_bytes(&out[1], i32::from_le_bytes);
        assert!(chunks == host_chunks.iter().flatten().copied().collect::<Vec<_>>(), "b {b}, {parts} parts: chunks");
        assert_eq!(from_bytes(&out[2], i32::from_le_bytes), host_begin, "b {b}, {parts} parts: chunk_begin");
        assert!(
            from_bytes(&out[3], i32::from_le_bytes) == mla::tile_order(&host_chunks),
            "b {b}, {parts} parts: order"
        );
    }
}

/// In a warp-specialized loop's PTX: whether two groups of `shape`'s
/// wgmmas run back to back (a commit, then another with no
/// `wgmma.wait_group` between: the second issued behind the first); whether
/// every group with A from registers meets a barrier before its wait (left
/// in flight across a hand-over); and whether a consumer releases a ring
/// stage (`mbarrier.arrive` without bytes) while any group is in flight.
fn wgmma_overlaps(ptx: &str, shape: &str) -> (bool, bool, bool) {
    let (mut open, mut reg_a_open, mut any_open) = (false, false, false);
    let (mut group, mut reg_a) = (false, false);
    let (mut behind, mut released) = (false, false);
    let (mut reg_a_groups, mut across) = (0, 0);
    for l in ptx.lines().map(str::trim) {
        if l.starts_with("wgmma.mma_async") {
            group |= l.contains(shape);
            // `wgmma.mma_async.. {d..}, {a..}, desc_b, ..`: A from registers.
            reg_a |= l.split("}, ").nth(1).is_some_and(|a| a.starts_with('{'));
        } else if l.starts_with("wgmma.commit_group") {
            behind |= open && group;
            open = group;
            any_open = true;
            reg_a_open = reg_a;
            reg_a_groups += reg_a as usize;
            group = false;
            reg_a = false;
        } else if l.starts_with("wgmma.wait_group") {
            open = false;
            reg_a_open = false;
            any_open = !l.ends_with(" 0;");
        } else if l.starts_with("barrier.sync") || l.starts_with("bar.sync") {
            across += reg_a_open as usize;
            reg_a_open = false;
        } else if l.starts_with("mbarrier.arrive.shared") {
            released |= any_open;
        }
    }
    (behind, reg_a_groups > 0 && across == reg_a_groups, released)
}

/// MLA's split kernel in FlashMLA's order (`tests/kernels/mla_halves.rs`:
/// each warpgroup its half of O, its own block's P·V from registers, then
/// the other block's from shared memory) in its warp-specialized variant:
/// each warpgroup's P·V from registers stays in flight across the
/// hand-over barrier that follows it, and warpgroup 1's second P·V issues
/// behind its first (a chain into one accumulator) with no wait between;
/// block 1's ring is released only after warpgroup 1's wait for both (the
/// chain's first P·V reads the stage too). The seesaw's cases on the
/// simulator, in order and interleaved, with and without arrivals; ptxas
/// assembles it clean.
#[test]
fn halves_warp_specialized_loop() {
    let meta = halves::mla_split_halves::meta::<f16, 256>();
    let (k, v) = compiled(meta);
    let ws: Vec<_> = v.iter().filter(|v| v.schedule.starts_with("warp_specialized_loop")).collect();
    assert_eq!(ws.len(), 1, "{:?}", v.iter().map(|v| v.schedule).collect::<Vec<_>>());
    assembles_clean(&k.name, &ws[0].ptx, ws[0].schedule);
    assert_eq!(
        wgmma_overlaps(&ws[0].ptx, "m64n256k16"),
        (true, true, false),
        "P·V waited for at once, or a stage released under it"
    );
    let c = Case { seqlens: vec![200, 130, 1], s_q: 2, h_q: 16, paged: true, num_parts: 4 };
    seesaw_cases(meta, CompileOptions::default(), &c, &[None, Some(7)]);
    let on = CompileOptions::default().with_on("wsloop_arrivals").unwrap();
    seesaw_cases(meta, on, &c, &[Some(5)]);
}

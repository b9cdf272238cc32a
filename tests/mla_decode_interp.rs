//! MLA decode (`examples/kernels/mla_decode.rs`) in the CPU interpreter at
//! small sizes against the f64 reference: seqlens 1, 63, 64, 65 and 0 in
//! one ragged batch, s_q 1 and 2 (causal within the new tokens), h_q 16 and
//! 20 (not a multiple of 64), f16 and bf16, paged (pages shuffled) and
//! contiguous caches, with the unused cache rows NaN and the outputs
//! poisoned; scores that jump between key blocks (the online softmax's
//! rescales); an empty split; the device scheduler against the host one and
//! the schedule's invariants; the host API's refusals.
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "../examples/kernels/mla_decode.rs"]
mod mla;
use mla::{Case, Inputs, Metadata, MlaElement, Tiles};
use tile::prelude::*;

fn st() -> Stream {
    Device::interpreter().stream().unwrap()
}

fn run<T: MlaElement>(c: &Case, tol: f64) {
    let st = st();
    let mut x = Inputs::<T>::new(&st, c, c.seqlens.len() as u64 * 7 + c.h_q as u64).unwrap();
    x.check_metadata(&st, c).unwrap_or_else(|e| panic!("{e}"));
    x.run(&st, c, Tiles::Auto).unwrap();
    x.check(&st, c, None, tol).unwrap_or_else(|e| panic!("{e}"));
}

fn combinations<T: MlaElement>(tol: f64) {
    for paged in [true, false] {
        for s_q in [1, 2] {
            for h_q in [16, 20] {
                // Three SM parts: 65 is split across two chunks.
                let c = Case { seqlens: vec![1, 63, 64, 65, 0], s_q, h_q, paged, num_parts: 3 };
                run::<T>(&c, tol);
            }
        }
    }
}

#[test]
fn every_combination_f16() {
    combinations::<f16>(1e-3);
}

#[test]
fn every_combination_bf16() {
    combinations::<bf16>(4e-3);
}

/// More than 64 query rows (two row blocks, the second partly past
/// s_q·h_q): h_q 40 with s_q 2 is 80 rows.
#[test]
fn two_row_blocks() {
    run::<f16>(&Case { seqlens: vec![130, 7], s_q: 2, h_q: 40, paged: true, num_parts: 2 }, 2e-3);
}

/// Two decode steps with one workspace: the second (one key fewer per
/// request, the metadata updated on the device) is right too, and the
/// workspace did not grow.
#[test]
fn second_step_reuses_the_workspace() {
    let st = st();
    let c = Case { seqlens: vec![65, 64, 1], s_q: 1, h_q: 16, paged: true, num_parts: 4 };
    let mut x = Inputs::<bf16>::new(&st, &c, 5).unwrap();
    x.run(&st, &c, Tiles::Auto).unwrap();
    x.check(&st, &c, None, 4e-3).unwrap_or_else(|e| panic!("{e}"));
    let rows = x.workspace.rows();
    let c2 = Case { seqlens: vec![64, 63, 0], ..c.clone() };
    x.seqlens = DeviceTensor::from_slice(&st, &c2.seqlens, &[3]).unwrap();
    x.metadata.update(&st, &x.seqlens).unwrap();
    x.check_metadata(&st, &c2).unwrap_or_else(|e| panic!("{e}"));
    x.run(&st, &c2, Tiles::Auto).unwrap();
    x.check(&st, &c2, None, 4e-3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(x.workspace.rows(), rows);
}

/// An empty split and a split a row sees nothing of contribute nothing:
/// batch 0 (seqlen 65, s_q 2) in the chunks [0, 1), [1, 1) (no work) and
/// [1, 2) (key 64 only, which token 0 does not see), batch 1 (seqlen 0) in
/// one empty chunk, given by hand.
#[test]
fn empty_splits() {
    let st = st();
    let c = Case { seqlens: vec![65, 0], s_q: 2, h_q: 16, paged: true, num_parts: 2 };
    let mut x = Inputs::<f16>::new(&st, &c, 3).unwrap();
    let chunks = [[0, 0, 1, 0], [0, 1, 1, 0], [0, 1, 2, 1], [1, 0, 0, 1]];
    x.metadata = Metadata {
        chunks: DeviceTensor::from_slice(&st, chunks.as_flattened(), &[4, 4]).unwrap(),
        chunk_begin: DeviceTensor::from_slice(&st, &[0, 3, 4], &[3]).unwrap(),
        // Any permutation of the chunks computes the same.
        order: DeviceTensor::from_slice(&st, &[2, 0, 3, 1], &[4]).unwrap(),
        chunk_order: mla::ChunkOrder::LongestFirst,
        batch: 2,
        num_parts: 2,
    };
    x.run(&st, &c, Tiles::Auto).unwrap();
    x.check(&st, &c, None, 2e-3).unwrap_or_else(|e| panic!("{e}"));
    let lse = x.lse.to_vec(&st).unwrap();
    assert!(lse[..32].iter().all(|l| l.is_finite()), "{lse:?}");
    assert!(lse[32..].iter().all(|&l| l == f32::NEG_INFINITY), "{lse:?}");
    assert!(x.out.to_vec(&st).unwrap()[2 * 16 * 512..].iter().all(|&v| v == 0.0));
}

/// The schedule covers every batch's key blocks exactly once, in order, in
/// consecutive chunks; no part gets more than its payload (but the last);
/// ragged batches are cut across parts; and the device computes the same.
#[test]
fn scheduler() {
    let mut rng = common::Rng::new(5);
    for case in 0..200 {
        let b = 1 + (rng.next_u64() % 40) as usize;
        let parts = 1 + (rng.next_u64() % 20) as usize;
        let seqlens: Vec<i32> =
            (0..b).map(|_| if rng.next_u64() % 5 == 0 { 0 } else { (rng.next_u64() % 3000) as i32 }).collect();
        let (chunks, begin) = mla::schedule(&seqlens, parts);
        assert_eq!(chunks.len(), b + parts);
        assert_eq!(begin[0], 0);
        let blocks = |s: i32| (s + 63) / 64;
        let total: i32 = seqlens.iter().map(|&s| blocks(s) + 5).sum();
        let payload = (total + parts as i32 - 1) / parts as i32 + 5;
        let mut cost = vec![0; parts];
        for bi in 0..b {
            let (c0, c1) = (begin[bi] as usize, begin[bi + 1] as usize);
            assert!(c1 > c0, "case {case}: batch {bi} has no chunk: {chunks:?}");
            let mut next = 0;
            for ch in &chunks[c0..c1] {
                assert_eq!((ch[0], ch[1]), (bi as i32, next), "case {case}: {chunks:?}");
                assert!(ch[2] > ch[1] || blocks(seqlens[bi]) == 0, "case {case}: an empty piece {ch:?}");
                next = ch[2];
                cost[ch[3] as usize] += ch[2] - ch[1] + 5;
            }
            assert_eq!(next, blocks(seqlens[bi]), "case {case}");
        }
        assert!(chunks[begin[b] as usize..].iter().all(|ch| *ch == [-1, 0, 0, -1]));
        for (p, &k) in cost.iter().enumerate().take(parts - 1) {
            assert!(k <= payload, "case {case}: part {p} costs {k} > {payload}");
        }
        if case < 10 {
            let st = st();
            let c = Case { seqlens: seqlens.clone(), s_q: 1, h_q: 16, paged: true, num_parts: parts };
            let d = DeviceTensor::from_slice(&st, &seqlens, &[b]).unwrap();
            let m = Metadata::compute(&st, &d, parts).unwrap();
            let got: Vec<i32> = m.chunks.to_vec(&st).unwrap();
            assert_eq!(got, chunks.iter().flatten().copied().collect::<Vec<_>>(), "{c:?}");
            assert_eq!(m.chunk_begin.to_vec(&st).unwrap(), begin, "{c:?}");
            assert_eq!(m.order.to_vec(&st).unwrap(), mla::tile_order(&chunks), "{c:?}");
        }
    }
    // A long request among short ones is cut so that the parts balance.
    let (chunks, _) = mla::schedule(&[4096, 64, 64, 64], 4);
    assert!(chunks.iter().filter(|ch| ch[0] == 0).count() >= 3, "{chunks:?}");
}

/// The order the split kernel runs the chunks in: a permutation, the used
/// chunks by key blocks longest first (ties in chunk order), the unused
/// rows last; `ChunkOrder::Batch` on the device is the identity.
#[test]
fn tile_order_is_longest_first() {
    let mut rng = common::Rng::new(23);
    for case in 0..100 {
        let b = 1 + (rng.next_u64() % 40) as usize;
        let parts = 1 + (rng.next_u64() % 20) as usize;
        let seqlens: Vec<i32> = (0..b).map(|_| (rng.next_u64() % 3000) as i32 - 100).collect();
        let (chunks, begin) = mla::schedule(&seqlens, parts);
        let order = mla::tile_order(&chunks);
        let mut seen = order.clone();
        seen.sort();
        assert_eq!(seen, (0..chunks.len() as i32).collect::<Vec<_>>(), "case {case}: not a permutation");
        let used = begin[b];
        let key = |r: i32| {
            let c = chunks[r as usize];
            (if r < used { c[2] - c[1] } else { -1 }, -r)
        };
        for w in order.windows(2) {
            assert!(key(w[0]) > key(w[1]), "case {case}: {order:?} of {chunks:?}");
        }
    }
    let st = st();
    let seqlens = [4096, 64, 0, 700];
    let d = DeviceTensor::from_slice(&st, &seqlens, &[4]).unwrap();
    let m = Metadata::compute_in(&st, &d, 3, mla::ChunkOrder::Batch).unwrap();
    assert_eq!(m.order.to_vec(&st).unwrap(), (0..7).collect::<Vec<i32>>());
    let m = Metadata::compute(&st, &d, 3).unwrap();
    assert_eq!(m.order.to_vec(&st).unwrap(), mla::tile_order(&mla::schedule(&seqlens, 3).0));
}

/// The device scheduler against the host's `schedule` at awkward batch
/// sizes (1, 3, 127, 128, 129, 300, and 1,500 and 2,100 over more than one
/// shared-memory segment of 1,024 batches), lengths at the key-block edges
/// (0, 1, 63, 64, 65, 8191) mixed at random or all alike, and SM parts from
/// 1 to more than there is work.
#[test]
fn scheduler_on_awkward_batches() {
    let st = st();
    let edges = [0, 1, 63, 64, 65, 8191];
    let mut rng = common::Rng::new(13);
    let mut n = 0;
    for b in [1usize, 3, 127, 128, 129, 300, 1500, 2100] {
        for parts in [1usize, 2, 7, 66, 132, 3 * b + 40] {
            for mix in 0..3 {
                let seqlens: Vec<i32> = (0..b)
                    .map(|i| match mix {
                        0 => edges[(rng.next_u64() % edges.len() as u64) as usize],
                        1 => edges[i % edges.len()],
                        _ => (rng.next_u64() % 9000) as i32 - 100,
                    })
                    .collect();
                if b > 300 && (parts > 132 || mix == 1) {
                    continue;
                }
                let (chunks, begin) = mla::schedule(&seqlens, parts);
                let d = DeviceTensor::from_slice(&st, &seqlens, &[b]).unwrap();
                let m = Metadata::compute(&st, &d, parts).unwrap();
                let got: Vec<i32> = m.chunks.to_vec(&st).unwrap();
                let want: Vec<i32> = chunks.iter().flatten().copied().collect();
                assert!(got == want, "b {b}, {parts} parts, mix {mix}: chunks differ from the host's");
                assert_eq!(m.chunk_begin.to_vec(&st).unwrap(), begin, "b {b}, {parts} parts, mix {mix}");
                assert!(
                    m.order.to_vec(&st).unwrap() == mla::tile_order(&chunks),
                    "b {b}, {parts} parts, mix {mix}: order"
                );
                n += 1;
            }
        }
    }
    assert!(n >= 100, "{n} cases");
    // All lengths alike, and all empty.
    for s in edges {
        for b in [1usize, 129] {
            let seqlens = vec![s; b];
            let (chunks, begin) = mla::schedule(&seqlens, 5);
            let m = Metadata::compute(&st, &DeviceTensor::from_slice(&st, &seqlens, &[b]).unwrap(), 5).unwrap();
            assert_eq!(
                m.chunks.to_vec(&st).unwrap(),
                chunks.iter().flatten().copied().collect::<Vec<_>>(),
                "{s} × {b}"
            );
            assert_eq!(m.chunk_begin.to_vec(&st).unwrap(), begin, "{s} × {b}");
            assert_eq!(m.order.to_vec(&st).unwrap(), mla::tile_order(&chunks), "{s} × {b}");
        }
    }
}

/// No requests, or no query rows: nothing to do, no error.
#[test]
fn empty_batch() {
    let st = st();
    let none = DeviceTensor::<i32>::from_slice(&st, &[], &[0]).unwrap();
    let m = Metadata::compute(&st, &none, 4).unwrap();
    assert_eq!(m.chunk_begin.to_vec(&st).unwrap(), [0]);
    let z16 = |s: &[usize]| DeviceTensor::<f16>::zeros(&st, s).unwrap();
    let z32 = |s: &[usize]| DeviceTensor::<f32>::zeros(&st, s).unwrap();
    let (q, cache) = (z16(&[0, 1, 16, 576]), z16(&[2, 64, 1, 576]));
    let table = DeviceTensor::<i32>::zeros(&st, &[0, 1]).unwrap();
    let kv = mla::Kv::Paged { cache: &cache, block_table: &table };
    let mut ws = mla::Workspace::new();
    let (mut out, mut lse) = (z32(&[0, 1, 16, 512]), z32(&[0, 16, 1]));
    mla::forward(&st, &q, kv, &none, &m, &mut ws, &mut out, &mut lse, mla::Options::new(0.1)).unwrap();
    // Heads 0: one request, no rows.
    let one = DeviceTensor::<i32>::from_slice(&st, &[5], &[1]).unwrap();
    let m = Metadata::compute(&st, &one, 4).unwrap();
    let (q, table) = (z16(&[1, 1, 0, 576]), DeviceTensor::<i32>::zeros(&st, &[1, 1]).unwrap());
    let kv = mla::Kv::Paged { cache: &cache, block_table: &table };
    let (mut out, mut lse) = (z32(&[1, 1, 0, 512]), z32(&[1, 0, 1]));
    mla::forward(&st, &q, kv, &one, &m, &mut ws, &mut out, &mut lse, mla::Options::new(0.1)).unwrap();
    assert_eq!(ws.rows(), 0);
}

#[test]
fn refusals() {
    let st = st();
    let c = Case { seqlens: vec![10, 20], s_q: 1, h_q: 4, paged: true, num_parts: 2 };
    let x = Inputs::<f16>::new(&st, &c, 1).unwrap();
    let z16 = |s: &[usize]| DeviceTensor::<f16>::zeros(&st, s).unwrap();
    let z32 = |s: &[usize]| DeviceTensor::<f32>::zeros(&st, s).unwrap();
    let zi = |s: &[usize]| DeviceTensor::<i32>::zeros(&st, s).unwrap();
    let paged = mla::Kv::Paged { cache: &x.cache, block_table: &x.block_table };
    let opts = mla::Options::new(0.1);
    let mut ws = mla::Workspace::new();
    let try_run = |q: &DeviceTensor<f16>,
                   kv: mla::Kv<'_, f16>,
                   seqlens: &DeviceTensor<i32>,
                   out: &mut DeviceTensor<f32>,
                   lse: &mut DeviceTensor<f32>,
                   opts: mla::Options,
                   ws: &mut mla::Workspace| {
        mla::forward(&st, q, kv, seqlens, &x.metadata, ws, out, lse, opts).unwrap_err().to_string()
    };
    let (q, mut out, mut lse) = (z16(&[2, 1, 4, 576]), z32(&[2, 1, 4, 512]), z32(&[2, 4, 1]));
    let cases: Vec<(String, &str)> = vec![
        (try_run(&z16(&[2, 1, 4, 512]), paged, &x.seqlens, &mut out, &mut lse, opts, &mut ws), "576"),
        (try_run(&z16(&[2, 4, 576]), paged, &x.seqlens, &mut out, &mut lse, opts, &mut ws), "4-D"),
        (
            try_run(
                &q,
                mla::Kv::Paged { cache: &z16(&[3, 32, 1, 576]), block_table: &x.block_table },
                &x.seqlens,
                &mut out,
                &mut lse,
                opts,
                &mut ws,
            ),
            "paged cache",
        ),
        (
            try_run(
                &q,
                mla::Kv::Paged { cache: &x.cache, block_table: &zi(&[3, 1]) },
                &x.seqlens,
                &mut out,
                &mut lse,
                opts,
                &mut ws,
            ),
            "block_table",
        ),
        (
            try_run(&q, mla::Kv::Contiguous(&z16(&[2, 8, 2, 576])), &x.seqlens, &mut out, &mut lse, opts, &mut ws),
            "contiguous",
        ),
        (try_run(&q, paged, &zi(&[3]), &mut out, &mut lse, opts, &mut ws), "cache_seqlens"),
        (try_run(&q, paged, &x.seqlens, &mut z32(&[2, 1, 4, 576]), &mut lse, opts, &mut ws), "out has shape"),
        (try_run(&q, paged, &x.seqlens, &mut out, &mut z32(&[2, 1, 4]), opts, &mut ws), "lse has shape"),
        (try_run(&q, paged, &x.seqlens, &mut out, &mut lse, mla::Options::new(f32::NAN), &mut ws), "scale"),
        (
            try_run(
                &z16(&[3, 1, 4, 576]),
                paged,
                &x.seqlens,
                &mut z32(&[3, 1, 4, 512]),
                &mut z32(&[3, 4, 1]),
                opts,
                &mut ws,
            ),
            "block_table",
        ),
    ];
    for (e, want) in cases {
        assert!(e.contains(want), "expected `{want}` in: {e}");
    }
    let e = Metadata::compute(&st, &zi(&[2, 2]), 4).err().unwrap().to_string();
    assert!(e.contains("1-D"), "{e}");
}

/// The device fill of the benchmark's caches gives what the host hash
/// says (the check of hashed inputs relies on it), paged and contiguous.
#[test]
fn hashed_inputs() {
    for paged in [true, false] {
        let c = Case { seqlens: vec![70, 3], s_q: 2, h_q: 16, paged, num_parts: 2 };
        let st = st();
        let mut x = Inputs::<bf16>::hashed(&st, &c, 9).unwrap();
        let cache = x.cache.to_vec(&st).unwrap();
        for (b, j) in [(0, 0), (0, 69), (1, 2), (0, 64)] {
            let row = if paged { x.table[b * 2 + j / 64] as usize * 64 + j % 64 } else { b * 128 + j };
            let got: Vec<f64> = cache[row * 576..][..576].iter().map(|v| v.to_f64()).collect();
            assert_eq!(got, x.key(b, j), "paged {paged}: key ({b}, {j})");
            assert!(got.iter().any(|&v| v != 0.0));
        }
        x.run(&st, &c, Tiles::Auto).unwrap();
        x.check(&st, &c, None, 1e-2).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Many SM parts (132, the H200's) over a ragged batch with a long
/// sequence: the 8191 keys in 64 chunks of two key blocks, most chunks
/// unused, an empty sequence and a one-key one (`gpu_mla_decode`'s first
/// case of `every_combination_*`; `tests/mla_decode_sim.rs` runs the
/// compiled kernels on such a schedule).
#[test]
fn many_parts_long_sequence() {
    run::<f16>(&Case { seqlens: vec![1, 63, 64, 65, 0, 8191], s_q: 1, h_q: 16, paged: true, num_parts: 132 }, 1e-3);
}

/// A row the check lists more than once is compared with its reference
/// values: the GPU tests sample rows of the long sequences (41 draws among
/// `s_q·h_q` rows repeat), and `reference` used to add a repeated row's
/// output once per draw, so `gpu_mla_decode`'s `every_combination_*` failed
/// on the H200 with a relative error of 0.12 (a row drawn 6 times had 6× its
/// output as the reference) while the kernels were right: the interpreter
/// gave the same 1.203e-1 on those sampled rows, with 132 parts and with 16,
/// and 4.8e-5 on every row once.
#[test]
fn repeated_rows() {
    let st = st();
    let c = Case { seqlens: vec![65, 3, 0], s_q: 2, h_q: 16, paged: true, num_parts: 3 };
    let mut x = Inputs::<f16>::new(&st, &c, 21).unwrap();
    x.run(&st, &c, Tiles::Auto).unwrap();
    let rows = [(0, 1, 5), (1, 0, 2), (0, 1, 5), (2, 1, 0), (0, 1, 5), (1, 0, 2)];
    x.check(&st, &c, Some(&rows), 1e-3).unwrap_or_else(|e| panic!("{e}"));
    // The reference of a repeated row is that of the row listed once.
    let key = |b: usize, j: usize| x.key(b, j);
    let scale = c.scale() as f64;
    let (o1, l1) = mla::reference(&x.q, &key, &c.seqlens, c.s_q, c.h_q, scale, &rows[..2]);
    let (o3, l3) = mla::reference(&x.q, &key, &c.seqlens, c.s_q, c.h_q, scale, &rows);
    assert!(o1.iter().any(|&v| v != 0.0));
    assert_eq!(o1, o3);
    for (b, t, h) in [(0, 1, 5), (1, 0, 2)] {
        let at = (b * c.h_q + h) * c.s_q + t;
        assert_eq!(l1[at], l3[at]);
        assert!(l1[at].is_finite());
    }
}

/// Scores that jump from key block to key block: the keys of block `k`
/// scaled by `1 + 8·(k mod 4)` (each block's largest score some 10 units of
/// log2 past the previous one's, so every block rescales O), and by
/// `19 / (1 + 8·(k mod 4))` (the first block's maximum stays the row's),
/// paged and contiguous, split across chunks.
#[test]
fn scores_that_jump() {
    for paged in [true, false] {
        for grow in [true, false] {
            let c = Case { seqlens: vec![200, 70, 1], s_q: 2, h_q: 16, paged, num_parts: 3 };
            let st = st();
            let mut x = Inputs::<f16>::new(&st, &c, 31).unwrap();
            x.scale_keys(&st, mla::jumping_keys(grow)).unwrap();
            x.run(&st, &c, Tiles::Auto).unwrap();
            x.check(&st, &c, None, 1e-3).unwrap_or_else(|e| panic!("paged {paged}, grow {grow}: {e}"));
        }
    }
}

/// The seesaw split kernel (`Tiles::Seesaw`: two key blocks per iteration,
/// block 0's softmax on warpgroup 0 and block 1's on warpgroup 1, each
/// warpgroup's running sums of its own blocks): seqlens 1, 63, 64, 65, 0
/// and 200 (chunks of odd and even block counts: an odd count's last block
/// loaded twice, the copy masked), s_q 1 and 2, h_q 16 and 20, f16 and
/// bf16, scores that jump between key blocks in both directions (every
/// block rescales O and the other warpgroup's sums).
#[test]
fn seesaw() {
    let st = st();
    for s_q in [1, 2] {
        for h_q in [16, 20] {
            let c = Case { seqlens: vec![1, 63, 64, 65, 0, 200], s_q, h_q, paged: true, num_parts: 4 };
            let mut x = Inputs::<f16>::new(&st, &c, 90 + h_q as u64).unwrap();
            x.run(&st, &c, Tiles::Seesaw).unwrap();
            x.check(&st, &c, None, 1e-3).unwrap_or_else(|e| panic!("f16 s_q {s_q} h_q {h_q}: {e}"));
            let mut x = Inputs::<bf16>::new(&st, &c, 91 + h_q as u64).unwrap();
            x.run(&st, &c, Tiles::Seesaw).unwrap();
            x.check(&st, &c, None, 4e-3).unwrap_or_else(|e| panic!("bf16 s_q {s_q} h_q {h_q}: {e}"));
        }
    }
    for grow in [true, false] {
        let c = Case { seqlens: vec![200, 70, 1, 330], s_q: 2, h_q: 16, paged: true, num_parts: 3 };
        let mut x = Inputs::<f16>::new(&st, &c, 32).unwrap();
        x.scale_keys(&st, mla::jumping_keys(grow)).unwrap();
        x.run(&st, &c, Tiles::Seesaw).unwrap();
        x.check(&st, &c, None, 1e-3).unwrap_or_else(|e| panic!("grow {grow}: {e}"));
    }
}

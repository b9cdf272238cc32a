//! The simulator harness shared by the gemm codegen tests: random f16/bf16
//! inputs, a kernel in text form (the shared ones are in `tile_testkit`)
//! compiled for sm_80 or sm_90a and run on the Thread IR simulator
//! (`crate::sim`), and f64 references (gemm, attention, MLA-shaped) to compare with.
#![allow(dead_code)]

use crate::sim;
use half::{bf16, f16};
use tile_ir::print::parse_kernel;
use tile_ir::*;
pub use tile_testkit::Rng;

/// Random values rounded to `dt` (f16 or bf16): (bytes, rounded values).
pub fn random(rng: &mut Rng, dt: DType, n: usize, lo: f32, hi: f32) -> (Vec<u8>, Vec<f64>) {
    assert!(matches!(dt, DType::F16 | DType::BF16), "inputs are f16 or bf16");
    let x: Vec<f32> = (0..n).map(|_| rng.f32(lo, hi)).collect();
    encode(dt, &x)
}

/// `x` rounded to `dt` (f16, bf16; f32 for any other): (bytes, rounded values).
pub fn encode(dt: DType, x: &[f32]) -> (Vec<u8>, Vec<f64>) {
    match dt {
        DType::F16 => (
            x.iter().flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes()).collect(),
            x.iter().map(|v| f16::from_f32(*v).to_f64()).collect(),
        ),
        DType::BF16 => (
            x.iter().flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes()).collect(),
            x.iter().map(|v| bf16::from_f32(*v).to_f64()).collect(),
        ),
        _ => (x.iter().flat_map(|v| v.to_le_bytes()).collect(), x.iter().map(|v| *v as f64).collect()),
    }
}

/// `b` as elements of `dt` (f16, bf16 or f32, little-endian), in f64.
pub fn decode(dt: DType, b: &[u8]) -> Vec<f64> {
    let size = dt.size_bytes() as usize;
    assert_eq!(b.len() % size, 0, "{} bytes are not whole {dt:?} elements", b.len());
    b.chunks(size)
        .map(|c| match dt {
            DType::F16 => f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64(),
            DType::BF16 => bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64(),
            DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            _ => panic!("decode: {dt:?} is not a float type the harness reads"),
        })
        .collect()
}

/// Compiles `text` for sm_80 and runs it on the simulator: tensors in
/// parameter order, then `dims` (in `k.dims` order), then scalar bits.
pub fn run(text: &str, tensors: Vec<Vec<u8>>, dims: &[i64], scalars: &[u64]) -> Vec<Vec<u8>> {
    run_on(Target::Sm80, text, tensors, dims, scalars)
}

/// [`run`] for `target`; checks that the simulator ran wgmmas exactly when
/// the PTX has them.
pub fn run_on(target: Target, text: &str, tensors: Vec<Vec<u8>>, dims: &[i64], scalars: &[u64]) -> Vec<Vec<u8>> {
    let k = parse_kernel(text).unwrap_or_else(|e| panic!("parse: {e:?}"));
    let c = compile(&k, target).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
    let sm = sim::launch(&c.function, &k, tensors, dims, scalars);
    assert_eq!(
        sm.hopper.wgmmas > 0,
        c.ptx.contains("wgmma.mma_async"),
        "{}: the simulator ran {} wgmmas",
        k.name,
        sm.hopper.wgmmas
    );
    sm.tensors
}

/// Relative L2 error of `got` against `want`.
pub fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

/// `op(a) · op(b)` in f64; `a` stored `[m, k]` (`[k, m]` if `ta`), `b` `[k, n]` (`[n, k]` if `tb`).
#[allow(clippy::too_many_arguments)]
pub fn reference(m: usize, n: usize, kk: usize, a: &[f64], b: &[f64], ta: bool, tb: bool) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..kk)
                .map(|p| {
                    let x = if ta { a[p * m + i] } else { a[i * kk + p] };
                    let y = if tb { b[j * kk + p] } else { b[p * n + j] };
                    x * y
                })
                .sum();
        }
    }
    c
}

#[allow(clippy::too_many_arguments)]
pub fn check_gemm(text: &str, dt: DType, m: usize, n: usize, kk: usize, ta: bool, tb: bool, dims: &[i64], tol: f64) {
    let mut rng = Rng(0x9E37_79B9 ^ (m * 1000 + n * 10 + kk) as u64);
    let (ab, av) = random(&mut rng, dt, m * kk, -1.0, 1.0);
    let (bb, bv) = random(&mut rng, dt, kk * n, -1.0, 1.0);
    // NaN bit patterns in the output: an element never written fails.
    let out = run(text, vec![ab, bb, vec![0xFF; 2 * m * n]], dims, &[]);
    let got = decode(dt, &out[2]);
    let want = reference(m, n, kk, &av, &bv, ta, tb);
    let err = rel_l2(&got, &want);
    assert!(err <= tol, "{m}x{n}x{kk}: relative L2 error {err:.3e} > {tol:.1e}");
}

/// Softmax attention of one head in f64: `softmax(q·kᵀ / √d) · v`, `q`
/// `[sq, d]`, `k` and `v` `[sk, d]`; the result `[sq, d]`.
pub fn attention_reference(q: &[f64], k: &[f64], v: &[f64], sq: usize, sk: usize, d: usize) -> Vec<f64> {
    let mut want = vec![0.0; sq * d];
    for i in 0..sq {
        let s: Vec<f64> =
            (0..sk).map(|j| (0..d).map(|c| q[i * d + c] * k[j * d + c]).sum::<f64>() / (d as f64).sqrt()).collect();
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
        let sum: f64 = p.iter().sum();
        for c in 0..d {
            want[i * d + c] = (0..sk).map(|j| p[j] * v[j * d + c]).sum::<f64>() / sum;
        }
    }
    want
}

/// The log-sum-exp of each query's scores in f64: `ln Σ_j exp(q_i·k_j / √d)`
/// (`q` `[sq, d]`, `k` `[sk, d]`); the result `[sq]`.
pub fn attention_lse_reference(q: &[f64], k: &[f64], sq: usize, sk: usize, d: usize) -> Vec<f64> {
    (0..sq)
        .map(|i| {
            let s: Vec<f64> =
                (0..sk).map(|j| (0..d).map(|c| q[i * d + c] * k[j * d + c]).sum::<f64>() / (d as f64).sqrt()).collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            mx + s.iter().map(|x| (x - mx).exp()).sum::<f64>().ln()
        })
        .collect()
}

/// Runs an attention kernel text (`tile_testkit::attention_text`: head
/// dimension `d`, element type `dt`) for `target` on random inputs from
/// `seed` at `sq` queries and `sk` keys, and compares with
/// [`attention_reference`] (relative L2 error at most `tol`).
#[allow(clippy::too_many_arguments)]
pub fn check_attention(target: Target, text: &str, dt: DType, d: usize, sq: usize, sk: usize, seed: u64, tol: f64) {
    let mut rng = Rng(seed);
    let (qb, qv) = random(&mut rng, dt, sq * d, -2.0, 2.0);
    let (kb, kv) = random(&mut rng, dt, sk * d, -2.0, 2.0);
    let (vb, vv) = random(&mut rng, dt, sk * d, -1.0, 1.0);
    let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
    let out = run_on(
        target,
        text,
        vec![qb, kb, vb, vec![0xFF; 2 * sq * d]],
        &[sq as i64, sk as i64],
        &[scale.to_bits() as u64],
    );
    let got = decode(dt, &out[3]);
    let want = attention_reference(&qv, &kv, &vv, sq, sk, d);
    let err = rel_l2(&got, &want);
    assert!(err <= tol, "attention d={d} sq={sq} sk={sk}: relative L2 error {err:.3e}");
}

/// The f64 reference of the MLA-shaped kernels (`codegen_wgmma_split`,
/// `codegen_warpgroup_owner`): softmax(q·kvᵀ / √dk) · v, `q` `[sq, dk]`,
/// `kv` `[sk, dk]`, `v` `[sk, dv]`.
pub fn mla_reference(q: &[f64], kv: &[f64], v: &[f64], sq: usize, sk: usize, dk: usize, dv: usize) -> Vec<f64> {
    let mut want = vec![0.0; sq * dv];
    for i in 0..sq {
        let s: Vec<f64> = (0..sk)
            .map(|j| (0..dk).map(|c| q[i * dk + c] * kv[j * dk + c]).sum::<f64>() / (dk as f64).sqrt())
            .collect();
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
        let sum: f64 = p.iter().sum();
        for c in 0..dv {
            want[i * dv + c] = (0..sk).map(|j| p[j] * v[j * dv + c]).sum::<f64>() / sum;
        }
    }
    want
}

/// Random f16 inputs of the MLA-shaped kernels (q, kv, v and a poisoned
/// f16 output `[sq, dv]`) and their [`mla_reference`], from `seed`.
pub fn mla_inputs(seed: u64, sq: usize, sk: usize, dk: usize, dv: usize) -> (Vec<Vec<u8>>, Vec<f64>) {
    let mut rng = Rng(seed ^ (sq * 1000 + sk * 7 + dk) as u64);
    let (qb, qv) = random(&mut rng, DType::F16, sq * dk, -1.0, 1.0);
    let (kb, kv) = random(&mut rng, DType::F16, sk * dk, -1.0, 1.0);
    let (vb, vv) = random(&mut rng, DType::F16, sk * dv, -1.0, 1.0);
    let want = mla_reference(&qv, &kv, &vv, sq, sk, dk, dv);
    (vec![qb, kb, vb, vec![0xFF; 2 * sq * dv]], want)
}

/// The `m64nNk16` instructions of a PTX module: N of each.
pub fn wgmma_ns(ptx: &str) -> Vec<u32> {
    ptx.lines()
        .filter_map(|l| l.trim().strip_prefix("wgmma.mma_async.sync.aligned.m64n"))
        .map(|rest| rest.split('k').next().unwrap().parse().unwrap())
        .collect()
}

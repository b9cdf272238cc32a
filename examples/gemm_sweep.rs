//! The GEMM sweep: the shapes LLM inference runs, ours against cuBLAS in the
//! same run. GPU only (without a GPU it checks the shape dispatch at small
//! sizes in the CPU interpreter and exits).
//!
//! Shapes: M ∈ {1, 16, 64, 128, 256, 1024, 4096, 8192} against the N × K of
//! real layers (4096 × 4096, 14336 × 4096, 4096 × 14336, 28672 × 8192,
//! 8192 × 8192), plus rows that are not 16-byte multiples (N = 4097, K = 4095,
//! both) at a few M; both layouts (`ab`: `c = a · b`, `b [K, N]`; `abt`:
//! `y = x · wᵀ`, `w [N, K]`) and both element types. Ours is
//! `kernels::ShapedGemm`: the configuration of the host rule
//! `kernels::choose`, or with `--tune` the autotuner's pick among
//! `kernels::candidates` where the rule is not sure (tuned once per shape
//! bucket and cached: `TILE_CACHE_DIR`, `TILE_TUNE`).
//!
//! Per shape: ours against cuBLAS over the whole output (`err`, the
//! relative L2 difference, and `identical`, the share of outputs bit for
//! bit cuBLAS's: a product with one K range sums in cuBLAS's order, so
//! `err=0` is common and real), and rows 0 and M − 1 against an f64 CPU
//! reference (`ref_err`, never 0); then both
//! timed with CUDA events in three interleaved rounds (ours, cuBLAS, ours,
//! ...; each round as many runs as fit in a third of `--budget-ms`, 3 to
//! 100, after one run of each to size the count; the median of the rounds'
//! medians), each side's runs rotating through copies of the operands
//! (`sets`: enough that a copy is three L2s of traffic away from its last
//! use, as a model's layer is; the same operands every run would keep the
//! smaller weights in L2, where a warm loop times the cache, not the
//! kernel: `--warm-l2` does that), TFLOPS and the ratio, and the
//! floor: the time to move the operands and the output once at 4.8 TB/s or
//! to do the FLOPs at 989 dense TFLOPS, whichever is longer (the H200's
//! figures). The host's work runs on every core (random operands, the
//! comparison, the reference rows: each reference row is computed once per
//! N × K and layout, for every M). One `RESULT gemm_sweep ...` line per
//! shape as soon as it is measured (with the milliseconds spent preparing:
//! allocation and the first launch, which loads the kernels; checking;
//! timing), the CSV written row by row, then the geometric mean and the
//! minimum of the ratios (`RESULT gemm_sweep_summary`).
//!
//! `cargo run --release --example gemm_sweep -- [options]`:
//! - `--m 1,16,..`, `--nk 4096x4096,..` (N×K), `--odd` / `--no-odd` (the odd
//!   shapes only / not), `--layout ab|abt[,..]`, `--dtype f16|bf16[,..]`;
//! - `--config TILES:SPLIT` (`64x128`, `128x128`, `128x256`, `16x128/2sm`,
//!   `64x128/2sm`, `64x64/3sm`, or on sm_90a `64x32/16st`, `64x64/12st`,
//!   `128x64/8st`; e.g. `64x128:4`; a suffix `:unpadded` reads rows that
//!   are not 16-byte multiples as they are, `ShapedGemm::unpadded`): every
//!   shape with this configuration instead of the rule's;
//! - `--tune`: the autotuner's configuration where the rule is not sure
//!   (its choices are cached; a second run reads them); `--save-tuning
//!   PATH`: the choices written as a file to ship (`TILE_TUNE_CACHE`);
//! - `--csv PATH`, `--plot PATH` (an SVG of the ratio against M, one line per
//!   N × K);
//! - `--budget-ms MS`: the timing budget per shape and side (default 25;
//!   `--quick`: 8);
//! - `--deadline S`: start no shape after S seconds (the summary, CSV and
//!   plot then cover the shapes measured, `partial=1`);
//! - `--warm-l2`: time every run on the same operands (one set);
//! - `--plan`: print each shape's configuration (the rule's), blocks, bytes,
//!   FLOPs, floor and the candidates `--tune` times, without running
//!   anything (no GPU needed).
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;

use tile::cublas;
use tile::prelude::*;

#[path = "kernels/common.rs"]
#[allow(dead_code)]
mod common;
#[path = "kernels/gemm.rs"]
mod kernels;
use kernels::{Config, GemmElement, Layout, ShapedGemm, Tiles};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The H200's HBM bandwidth (bytes/s) and dense fp16/bf16 tensor peak (FLOP/s).
const HBM: f64 = 4.8e12;
const PEAK: f64 = 989e12;

/// The H200's L2 (`hopper-facts.md`: 60 MiB).
const L2_BYTES: usize = 60 << 20;

/// How many copies of an `m × k` by `k × n` problem's operands (and
/// output) the timing rotates through: enough that the runs between two
/// uses of one copy move at least three L2s (METHOD: data several times
/// the L2, else repeated runs time the cache), at most 8; 1 where one copy
/// is that large already (28672 × 8192 weights).
fn operand_sets(m: usize, n: usize, k: usize, elem: usize) -> usize {
    let bytes = (m * k + n * k + m * n) * elem;
    (3 * L2_BYTES).div_ceil(bytes.max(1)).clamp(1, 8)
}

const MS: [usize; 8] = [1, 16, 64, 128, 256, 1024, 4096, 8192];
const NKS: [(usize, usize); 5] = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 8192)];
/// Rows that are not 16-byte multiples: odd N, odd K, both.
const ODD_NKS: [(usize, usize); 3] = [(4097, 4096), (4096, 4095), (4097, 4095)];
const ODD_MS: [usize; 4] = [16, 128, 1024, 4096];

trait Dtype: GemmElement + cublas::CublasElement {
    const NAME: &'static str;
    /// Relative L2 error allowed (one rounding of the output, f32 sums).
    const TOL: f64;
}
impl Dtype for f16 {
    const NAME: &'static str = "f16";
    const TOL: f64 = 2e-3;
}
impl Dtype for bf16 {
    const NAME: &'static str = "bf16";
    const TOL: f64 = 1e-2;
}

struct Options {
    ms: Vec<usize>,
    nks: Vec<(usize, usize)>,
    odd: bool,
    regular: bool,
    layouts: Vec<Layout>,
    dtypes: Vec<String>,
    config: Option<Config>,
    /// `--config …:unpadded`: `ShapedGemm::unpadded` with that configuration.
    unpadded: bool,
    csv: Option<PathBuf>,
    plot: Option<PathBuf>,
    budget_ms: f64,
    deadline: Option<f64>,
    tune: bool,
    save_tuning: Option<PathBuf>,
    plan: bool,
    /// `--warm-l2`: time every run on the same operands (which then stay
    /// in L2 between runs where they fit) instead of rotating through
    /// [`operand_sets`] copies.
    warm_l2: bool,
}

const USAGE: &str = "usage: gemm_sweep [--m M,..] [--nk NxK,..] [--odd|--no-odd] [--layout ab|abt,..] \
                     [--dtype f16|bf16,..] [--config TILES:SPLIT[:unpadded]] [--tune] [--save-tuning PATH] [--csv PATH] [--plot PATH] \
                     [--budget-ms MS] [--quick] [--deadline S] [--warm-l2] [--plan]";

fn parse_list<T>(v: &str, f: impl Fn(&str) -> Option<T>, what: &str) -> Result<Vec<T>, String> {
    v.split(',').map(|x| f(x.trim()).ok_or(format!("{what}: `{x}` is not valid"))).collect()
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut o = Options {
            ms: MS.to_vec(),
            nks: NKS.to_vec(),
            odd: true,
            regular: true,
            layouts: vec![Layout::Ab, Layout::Abt],
            dtypes: vec!["f16".into(), "bf16".into()],
            config: None,
            unpadded: false,
            csv: None,
            plot: None,
            budget_ms: 25.0,
            warm_l2: false,
            deadline: None,
            tune: false,
            save_tuning: None,
            plan: false,
        };
        let mut budget_given = false;
        let mut ms_given = false;
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let mut value = |name: &str| inline.clone().or_else(|| args.next()).ok_or(format!("{name} needs a value"));
            match flag.as_str() {
                "--m" => {
                    o.ms = parse_list(&value("--m")?, |x| x.parse().ok().filter(|&m: &usize| m > 0), "--m")?;
                    ms_given = true;
                }
                "--nk" => {
                    o.nks = parse_list(
                        &value("--nk")?,
                        |x| {
                            let (n, k) = x.split_once('x')?;
                            Some((n.parse().ok()?, k.parse().ok()?))
                        },
                        "--nk",
                    )?
                }
                "--odd" => o.regular = false,
                "--no-odd" => o.odd = false,
                "--layout" => {
                    o.layouts = parse_list(
                        &value("--layout")?,
                        |x| match x {
                            "ab" => Some(Layout::Ab),
                            "abt" => Some(Layout::Abt),
                            _ => None,
                        },
                        "--layout",
                    )?
                }
                "--dtype" => {
                    o.dtypes = parse_list(
                        &value("--dtype")?,
                        |x| ["f16", "bf16"].contains(&x).then(|| x.to_string()),
                        "--dtype",
                    )?
                }
                "--config" => {
                    let v = value("--config")?;
                    let (spec, unpadded) = match v.strip_suffix(":unpadded") {
                        Some(spec) => (spec, true),
                        None => (v.as_str(), false),
                    };
                    let parsed = spec.split_once(':').and_then(|(t, s)| {
                        let tiles = Tiles::ALL.into_iter().find(|x| x.name() == t)?;
                        Some(Config { tiles, split: s.parse().ok().filter(|&s: &usize| (1..=64).contains(&s))? })
                    });
                    o.config =
                        Some(parsed.ok_or(format!("--config: `{v}` is not TILES:SPLIT[:unpadded] (e.g. 64x128:4)"))?);
                    o.unpadded = unpadded;
                }
                "--csv" => o.csv = Some(value("--csv")?.into()),
                "--plot" => o.plot = Some(value("--plot")?.into()),
                "--quick" => {
                    if !budget_given {
                        o.budget_ms = 8.0;
                    }
                }
                "--budget-ms" => {
                    let v = value("--budget-ms")?;
                    o.budget_ms = v.parse().ok().filter(|&b: &f64| b > 0.0).ok_or(format!("--budget-ms: `{v}`"))?;
                    budget_given = true;
                }
                "--deadline" => {
                    let v = value("--deadline")?;
                    o.deadline = Some(v.parse().ok().filter(|&d: &f64| d > 0.0).ok_or(format!("--deadline: `{v}`"))?);
                }
                "--tune" => o.tune = true,
                "--save-tuning" => o.save_tuning = Some(value("--save-tuning")?.into()),
                "--plan" => o.plan = true,
                "--warm-l2" => o.warm_l2 = true,
                "-h" | "--help" => return Err(String::new()),
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        if !ms_given && !o.regular {
            o.ms = ODD_MS.to_vec();
        }
        Ok(o)
    }

    /// Every (m, n, k) of the sweep, regular shapes first.
    fn shapes(&self) -> Vec<(usize, usize, usize)> {
        let mut v = Vec::new();
        if self.regular {
            for &(n, k) in &self.nks {
                for &m in &self.ms {
                    v.push((m, n, k));
                }
            }
        }
        if self.odd {
            let ms: Vec<usize> = if self.regular { ODD_MS.to_vec() } else { self.ms.clone() };
            for &(n, k) in &ODD_NKS {
                for &m in &ms {
                    v.push((m, n, k));
                }
            }
        }
        v
    }
}

/// One measured shape.
struct Row {
    layout: Layout,
    dtype: &'static str,
    m: usize,
    n: usize,
    k: usize,
    config: Config,
    /// The configuration as `ShapedGemm::describe` names it (`… unpadded`
    /// where odd rows are read as they are).
    described: String,
    ours_us: f64,
    cublas_us: f64,
    /// Host microseconds per call ([`Timed`]).
    ours_host_us: f64,
    cublas_host_us: f64,
    /// The operand sets the timing rotated through ([`operand_sets`]).
    sets: usize,
    floor_us: f64,
    /// Relative L2 difference from cuBLAS over the whole output.
    err: f64,
    /// The share of outputs bit-for-bit cuBLAS's.
    identical: f64,
    /// The larger relative L2 error of rows 0 and M − 1 against the f64
    /// reference.
    ref_err: f64,
    /// Where the configuration came from: `rule`, `given`, or the tuner's
    /// `Tuned`, `Cache`, `Shipped`, `Default`.
    source: String,
    /// Milliseconds preparing (allocation, the first launch: kernel loads,
    /// tuning), checking and timing this shape.
    setup_ms: f64,
    check_ms: f64,
    time_ms: f64,
}

impl Row {
    fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
    fn ratio(&self) -> f64 {
        self.cublas_us / self.ours_us
    }
    /// Blocks launched by the GEMM kernel (tiles × K ranges), against the
    /// GPU's 132 SMs.
    fn blocks(&self) -> usize {
        let (bm, bn) = self.config.tiles.dims();
        self.m.div_ceil(bm) * self.n.div_ceil(bn) * self.config.split
    }
    fn layout_name(&self) -> &'static str {
        match self.layout {
            Layout::Ab => "ab",
            Layout::Abt => "abt",
        }
    }
}

/// Threads for the host's work: every core.
fn threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// `n` random values in [-1, 1) as `T`, generated in chunks of 2^20 on
/// every core (chunk `i` from its own seed: the values do not depend on
/// the number of threads).
fn random_vec<T: Element>(seed: u64, n: usize) -> Vec<T> {
    const CHUNK: usize = 1 << 20;
    let mut out = vec![T::from_f64(0.0); n];
    let chunks: Vec<(usize, &mut [T])> = out.chunks_mut(CHUNK).enumerate().collect();
    let per = chunks.len().div_ceil(threads()).max(1);
    let mut groups: Vec<Vec<(usize, &mut [T])>> = Vec::new();
    for (i, c) in chunks {
        if i % per == 0 {
            groups.push(Vec::new());
        }
        groups.last_mut().expect("a group").push((i, c));
    }
    std::thread::scope(|scope| {
        for group in groups {
            scope.spawn(move || {
                for (i, chunk) in group {
                    let mut rng = common::Rng::new(seed ^ (i as u64).wrapping_mul(0x9E37_79B9));
                    for x in chunk.iter_mut() {
                        *x = T::from_f64(rng.uniform(-1.0, 1.0) as f64);
                    }
                }
            });
        }
    });
    out
}

/// Random values in [-1, 1) as `T`, on the device with shape `shape`.
fn random<T: Element>(s: &Stream, seed: u64, shape: &[usize]) -> Res<(Vec<T>, DeviceTensor<T>)> {
    let host = random_vec::<T>(seed, shape.iter().product());
    let dev = DeviceTensor::from_slice(s, &host, shape)?;
    Ok((host, dev))
}

/// Relative L2 difference of two outputs and how many elements are
/// bit-for-bit the same (the same K order in f32 gives the same sums: a
/// split-1 product against cuBLAS is often identical), on every core.
fn compare<T: Element>(x: &[T], y: &[T]) -> (f64, usize) {
    let chunk = x.len().div_ceil(threads()).max(1);
    let same: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = x
            .chunks(chunk)
            .zip(y.chunks(chunk))
            .map(|(x, y)| scope.spawn(move || x.iter().zip(y).filter(|(a, b)| a.to_f64() == b.to_f64()).count()))
            .collect();
        handles.into_iter().map(|h| h.join().expect("a comparison thread")).sum()
    });
    (rel_diff(x, y), same)
}

/// Relative L2 difference of two outputs, on every core.
fn rel_diff<T: Element>(x: &[T], y: &[T]) -> f64 {
    let chunk = x.len().div_ceil(threads()).max(1);
    let sums: Vec<(f64, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = x
            .chunks(chunk)
            .zip(y.chunks(chunk))
            .map(|(x, y)| {
                scope.spawn(move || {
                    let (mut num, mut den) = (0.0f64, 0.0f64);
                    for (a, b) in x.iter().zip(y) {
                        let (a, b) = (a.to_f64(), b.to_f64());
                        num += (a - b) * (a - b);
                        den += b * b;
                    }
                    (num, den)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a comparison thread")).collect()
    });
    let (num, den) = sums.iter().fold((0.0, 0.0), |(n, d), (a, b)| (n + a, d + b));
    if !num.is_finite() {
        return f64::INFINITY;
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// The f64 reference of rows `rows` of `a · b` (`a` `[·, k]` row-major,
/// `b` `[k, n]`, or `[n, k]` when `trans_b`), one pass over `b` shared by
/// every row, the columns split over every core. Row `r`'s values are
/// `out[r_index][..n]`.
fn reference_rows<T: Element>(n: usize, k: usize, a: &[T], b: &[T], trans_b: bool, rows: &[usize]) -> Vec<Vec<f64>> {
    let a_rows: Vec<Vec<f64>> =
        rows.iter().map(|&r| a[r * k..(r + 1) * k].iter().map(|x| x.to_f64()).collect()).collect();
    let cols = n.div_ceil(threads()).max(1);
    let parts: Vec<Vec<Vec<f64>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .step_by(cols)
            .map(|j0| {
                let a_rows = &a_rows;
                scope.spawn(move || {
                    let j1 = (j0 + cols).min(n);
                    let mut out = vec![vec![0.0f64; j1 - j0]; a_rows.len()];
                    let mut line = vec![0.0f64; if trans_b { k } else { j1 - j0 }];
                    if trans_b {
                        for j in j0..j1 {
                            for (x, v) in line.iter_mut().zip(&b[j * k..(j + 1) * k]) {
                                *x = v.to_f64();
                            }
                            for (o, ar) in out.iter_mut().zip(a_rows) {
                                o[j - j0] = ar.iter().zip(&line).map(|(x, y)| x * y).sum();
                            }
                        }
                    } else {
                        for p in 0..k {
                            for (x, v) in line.iter_mut().zip(&b[p * n + j0..p * n + j1]) {
                                *x = v.to_f64();
                            }
                            for (o, ar) in out.iter_mut().zip(a_rows) {
                                let ap = ar[p];
                                for (acc, y) in o.iter_mut().zip(&line) {
                                    *acc += ap * y;
                                }
                            }
                        }
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a reference thread")).collect()
    });
    (0..rows.len()).map(|r| parts.iter().flat_map(|p| p[r].iter().copied()).collect()).collect()
}

/// Times `ours` and `peer` with CUDA events in [`ROUNDS`] interleaved
/// rounds (ours, the peer, ours, ...), each round one warm-up and as many
/// runs as fit in `budget_ms / ROUNDS` (3 to 100; sized by one run of
/// each), and returns each side's median milliseconds per run: the median
/// of its rounds' medians. Both sides see the same moments of the GPU (a
/// clock change, another process) and one bad round decides nothing: with
/// one round per side, two sweeps of the same kernels gave one ~12 µs
/// shape 0.80 and 0.97 of cuBLAS (session 15).
fn timed_pair(
    s: &Stream,
    budget_ms: f64,
    mut ours: impl FnMut() -> tile::Result<()>,
    mut peer: impl FnMut() -> tile::Result<()>,
) -> Res<Timed> {
    let per_round = budget_ms / ROUNDS as f64;
    let iters = |once: BenchResult| ((per_round / once.median_ms.max(1e-3)) as usize).clamp(3, 100);
    let (n_ours, n_peer) = (iters(bench(s, 0, 1, &mut ours)?), iters(bench(s, 0, 1, &mut peer)?));
    let (mut t_ours, mut t_peer) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        t_ours.push(bench(s, 1, n_ours, &mut ours)?.median_ms);
        t_peer.push(bench(s, 1, n_peer, &mut peer)?.median_ms);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(Timed {
        ours_ms: median(t_ours),
        peer_ms: median(t_peer),
        ours_host_us: host_us(s, &mut ours)?,
        peer_host_us: host_us(s, &mut peer)?,
    })
}

/// What [`timed_pair`] measured.
struct Timed {
    /// Each side's median milliseconds per run (GPU time between events).
    ours_ms: f64,
    peer_ms: f64,
    /// Each side's host time per call (the launch path: argument checks,
    /// tensor maps, the driver's launch), microseconds: where it is near
    /// the GPU time, the timing measures the host, not the kernel.
    ours_host_us: f64,
    peer_host_us: f64,
}

/// The host's microseconds per call of `f`, over 20 calls queued without
/// waiting (the stream is synchronized before and after).
fn host_us(s: &Stream, f: &mut impl FnMut() -> tile::Result<()>) -> Res<f64> {
    const CALLS: usize = 20;
    s.synchronize()?;
    let t = std::time::Instant::now();
    for _ in 0..CALLS {
        f()?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / CALLS as f64;
    s.synchronize()?;
    Ok(us)
}

/// Interleaved timing rounds per shape ([`timed_pair`]).
const ROUNDS: usize = 3;

/// What one (element type, N × K) needs for every M and layout: the
/// operands on the host (`a` for the largest M) and NaNs to fill outputs
/// with (a value the kernels never leave behind).
struct Operands<T> {
    n: usize,
    k: usize,
    a_host: Vec<T>,
    w_host: Vec<T>,
    nan: Vec<T>,
}

/// The sweep for one element type over every (N, K) and M.
fn sweep<T: Dtype>(s: &Stream, blas: &cublas::Gemm, o: &Options, out: &mut Output) -> Res<()> {
    let shapes = o.shapes();
    let mut nks: Vec<(usize, usize)> = shapes.iter().map(|&(_, n, k)| (n, k)).collect();
    nks.dedup();
    for (n, k) in nks {
        if out.past_deadline(o) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        // One pair of operands per (N, K) (the largest M), reused for every M
        // and layout: the first m rows of `a` for M = m.
        let ms: Vec<usize> = shapes.iter().filter(|s| (s.1, s.2) == (n, k)).map(|s| s.0).collect();
        let m_max = ms.iter().copied().max().unwrap_or(1);
        let ops = Operands {
            n,
            k,
            a_host: random_vec::<T>((n * 3 + k) as u64, m_max * k),
            w_host: random_vec::<T>((n + k * 5) as u64, n * k),
            nan: vec![T::from_f64(f64::NAN); m_max * n],
        };
        let mut w = Some(DeviceTensor::from_slice(s, &ops.w_host, &[n * k])?);
        // The rows checked against the f64 reference: 0 and m - 1 of every M.
        let mut rows: Vec<usize> = ms.iter().flat_map(|&m| [0, m - 1]).collect();
        rows.sort_unstable();
        rows.dedup();
        println!(
            "-- {} n={n} k={k}: operands ready in {:.0} ms ({} shapes, {} reference rows)",
            T::NAME,
            started.elapsed().as_secs_f64() * 1e3,
            ms.len() * o.layouts.len(),
            rows.len()
        );
        for &layout in &o.layouts {
            let shape = match layout {
                Layout::Ab => [k, n],
                Layout::Abt => [n, k],
            };
            let wl = w.take().expect("the weights").reshape(&shape)?;
            let t = std::time::Instant::now();
            let refs = reference_rows(n, k, &ops.a_host, &ops.w_host, layout == Layout::Abt, &rows);
            let reference: BTreeMap<usize, Vec<f64>> = rows.iter().copied().zip(refs).collect();
            let ref_ms = t.elapsed().as_secs_f64() * 1e3;
            let mut first = true;
            for &m in &ms {
                if out.past_deadline(o) {
                    return Ok(());
                }
                let mut row = measure::<T>(s, blas, o, layout, m, &ops, &wl, &reference)?;
                if first {
                    // The reference rows of this layout count as the first shape's check.
                    row.check_ms += ref_ms;
                    first = false;
                }
                out.push(row)?;
            }
            w = Some(wl.reshape(&[n * k])?);
        }
    }
    Ok(())
}

/// Checks and times one shape.
#[allow(clippy::too_many_arguments)]
fn measure<T: Dtype>(
    s: &Stream,
    blas: &cublas::Gemm,
    o: &Options,
    layout: Layout,
    m: usize,
    ops: &Operands<T>,
    w: &DeviceTensor<T>,
    reference: &BTreeMap<usize, Vec<f64>>,
) -> Res<Row> {
    let (n, k) = (ops.n, ops.k);
    let trans_b = layout == Layout::Abt;
    let t = std::time::Instant::now();
    let a = DeviceTensor::from_slice(s, &ops.a_host[..m * k], &[m, k])?;
    let mut c = DeviceTensor::from_slice(s, &ops.nan[..m * n], &[m, n])?;
    let mut c_blas = DeviceTensor::<T>::zeros(s, &[m, n])?;
    let (mut ours, source) = if o.tune && o.config.is_none() {
        let (g, record) = ShapedGemm::<T>::tuned(s, tile::tune::Tuner::global()?, layout, &a, w, &mut c)?;
        // Tuning wrote `c`: NaNs again, so that the check sees only this run.
        c = DeviceTensor::from_slice(s, &ops.nan[..m * n], &[m, n])?;
        let source = if record.candidates.is_empty() && record.hash.is_empty() {
            "rule".to_string()
        } else {
            format!("{:?}", record.source)
        };
        (g, source)
    } else {
        let source = if o.config.is_some() { "given" } else { "rule" };
        let g = match o.config {
            Some(config) if o.unpadded => ShapedGemm::<T>::unpadded(s, m, n, k, layout, config)?,
            config => ShapedGemm::<T>::new(s, m, n, k, layout, config)?,
        };
        (g, source.to_string())
    };
    ours.run(s, &a, w, &mut c)?;
    s.synchronize()?;
    let setup_ms = t.elapsed().as_secs_f64() * 1e3;

    let t = std::time::Instant::now();
    blas.gemm(m, n, k, &a, w, &mut c_blas, false, trans_b)?;
    let got = c.to_vec(s)?;
    let want = c_blas.to_vec(s)?;
    let (err, same) = compare(&got, &want);
    let what = format!("{} {} {m}x{n}x{k} ({})", T::NAME, if trans_b { "abt" } else { "ab" }, ours.describe());
    if err > T::TOL {
        return Err(format!("{what}: ours and cuBLAS differ by {err:.2e} (> {:.0e})", T::TOL).into());
    }
    let sample = [0, m - 1];
    let mut ref_err = 0.0f64;
    for &r in &sample[..if m > 1 { 2 } else { 1 }] {
        let want = reference.get(&r).ok_or(format!("{what}: no reference for row {r}"))?;
        let e = assert_close(&got[r * n..(r + 1) * n], want, T::TOL)
            .map_err(|e| format!("{what}, row {r} against the f64 reference: {e}"))?;
        ref_err = ref_err.max(e);
    }
    drop((got, want));
    let check_ms = t.elapsed().as_secs_f64() * 1e3;

    let t = std::time::Instant::now();
    // Copies of the operands that each side's runs rotate through (the
    // checked set first, then `sets − 1` copies; each side its own outputs),
    // so that every run reads its operands from HBM, as a model's layer does,
    // not from an L2 that the run before left them in.
    let sets = if o.warm_l2 { 1 } else { operand_sets(m, n, k, std::mem::size_of::<T>()) };
    let mut copies = Vec::with_capacity(sets - 1);
    for _ in 1..sets {
        copies.push((a.try_clone(s)?, w.try_clone(s)?, c.try_clone(s)?, c_blas.try_clone(s)?));
    }
    let (mut inputs, mut ours_out, mut peer_out) = (vec![(&a, w)], vec![&mut c], vec![&mut c_blas]);
    for (ca, cw, cc, cb) in copies.iter_mut() {
        inputs.push((&*ca, &*cw));
        ours_out.push(cc);
        peer_out.push(cb);
    }
    let (mut i_ours, mut i_peer) = (0, 0);
    let timed = timed_pair(
        s,
        o.budget_ms,
        || {
            i_ours = (i_ours + 1) % sets;
            ours.run(s, inputs[i_ours].0, inputs[i_ours].1, ours_out[i_ours])
        },
        || {
            i_peer = (i_peer + 1) % sets;
            blas.gemm(m, n, k, inputs[i_peer].0, inputs[i_peer].1, peer_out[i_peer], false, trans_b)
        },
    )?;
    let time_ms = t.elapsed().as_secs_f64() * 1e3;
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let bytes = 2.0 * (m * k + n * k + m * n) as f64;
    let floor_us = (bytes / HBM).max(flops / PEAK) * 1e6;
    Ok(Row {
        layout,
        dtype: T::NAME,
        m,
        n,
        k,
        config: ours.config,
        described: ours.describe(),
        ours_us: timed.ours_ms * 1e3,
        cublas_us: timed.peer_ms * 1e3,
        ours_host_us: timed.ours_host_us,
        sets,
        cublas_host_us: timed.peer_host_us,
        floor_us,
        err,
        identical: same as f64 / (m * n) as f64,
        ref_err,
        source,
        setup_ms,
        check_ms,
        time_ms,
    })
}

/// Where the rows go as they are measured: stdout (a flushed `RESULT`
/// line each) and the CSV file (a flushed row each).
struct Output {
    rows: Vec<Row>,
    csv: Option<std::io::BufWriter<std::fs::File>>,
    start: std::time::Instant,
    partial: bool,
}

const CSV_HEADER: &str =
    "layout,dtype,m,n,k,config,source,blocks,ours_us,cublas_us,floor_us,ours_tflops,cublas_tflops,\
                          ratio,floor_over_ours,rel_diff,identical,ref_err,setup_ms,check_ms,time_ms,ours_host_us,cublas_host_us,operand_sets";

impl Output {
    fn new(csv: Option<&PathBuf>) -> Res<Output> {
        let csv = match csv {
            Some(p) => {
                let mut f = std::io::BufWriter::new(std::fs::File::create(p)?);
                writeln!(f, "{CSV_HEADER}")?;
                f.flush()?;
                Some(f)
            }
            None => None,
        };
        Ok(Output { rows: Vec::new(), csv, start: std::time::Instant::now(), partial: false })
    }

    fn past_deadline(&mut self, o: &Options) -> bool {
        if o.deadline.is_some_and(|d| self.start.elapsed().as_secs_f64() > d) {
            if !self.partial {
                println!("-- deadline of {:.0} s reached: no more shapes", o.deadline.unwrap_or(0.0));
            }
            self.partial = true;
        }
        self.partial
    }

    fn push(&mut self, r: Row) -> Res<()> {
        println!(
            "RESULT gemm_sweep layout={} dtype={} m={} n={} k={} config=\"{}\" source={} blocks={} ours_us={:.1} \
             cublas_us={:.1} floor_us={:.1} ours_tflops={:.1} cublas_tflops={:.1} ratio={:.3} err={:.1e} \
             identical={:.3} ref_err={:.1e} sets={} setup_ms={:.0} check_ms={:.0} time_ms={:.0} elapsed_s={:.1}",
            r.layout_name(),
            r.dtype,
            r.m,
            r.n,
            r.k,
            r.described,
            r.source,
            r.blocks(),
            r.ours_us,
            r.cublas_us,
            r.floor_us,
            r.flops() / r.ours_us / 1e6,
            r.flops() / r.cublas_us / 1e6,
            r.ratio(),
            r.err,
            r.identical,
            r.ref_err,
            r.sets,
            r.setup_ms,
            r.check_ms,
            r.time_ms,
            self.start.elapsed().as_secs_f64()
        );
        std::io::stdout().flush()?;
        if let Some(f) = &mut self.csv {
            writeln!(
                f,
                "{},{},{},{},{},{},{},{},{:.2},{:.2},{:.2},{:.2},{:.2},{:.4},{:.4},{:.2e},{:.4},{:.2e},{:.1},{:.1},{:.1},{:.2},{:.2},{}",
                r.layout_name(),
                r.dtype,
                r.m,
                r.n,
                r.k,
                r.described,
                r.source,
                r.blocks(),
                r.ours_us,
                r.cublas_us,
                r.floor_us,
                r.flops() / r.ours_us / 1e6,
                r.flops() / r.cublas_us / 1e6,
                r.ratio(),
                r.floor_us / r.ours_us,
                r.err,
                r.identical,
                r.ref_err,
                r.setup_ms,
                r.check_ms,
                r.time_ms,
                r.ours_host_us,
                r.cublas_host_us,
                r.sets
            )?;
            f.flush()?;
        }
        self.rows.push(r);
        Ok(())
    }
}

/// The ratio to cuBLAS against M (log scale), one line per N × K (the
/// geometric mean over layouts and element types).
fn plot(rows: &[Row], path: &PathBuf) -> Res<()> {
    use plotters::prelude::*;
    let mut groups: BTreeMap<(usize, usize), BTreeMap<usize, Vec<f64>>> = BTreeMap::new();
    for r in rows {
        groups.entry((r.n, r.k)).or_default().entry(r.m).or_default().push(r.ratio().ln());
    }
    let top = rows.iter().map(|r| r.ratio()).fold(1.2, f64::max) * 1.05;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("GEMM: ours / cuBLAS (time ratio, geomean over layouts and dtypes)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(-0.3f64..13.3f64, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("M (tokens)")
        .y_desc("speed relative to cuBLAS")
        .x_labels(14)
        .x_label_formatter(&|x| format!("{}", 2f64.powf(x.round()) as u64))
        .draw()?;
    chart.draw_series(LineSeries::new(vec![(-0.3, 1.0), (13.3, 1.0)], BLACK.mix(0.4).stroke_width(1)))?;
    chart.draw_series(LineSeries::new(vec![(-0.3, 0.8), (13.3, 0.8)], RED.mix(0.3).stroke_width(1)))?;
    for (i, ((n, k), per_m)) in groups.into_iter().enumerate() {
        let c = Palette99::pick(i).to_rgba();
        let color = RGBColor(c.0, c.1, c.2);
        let pts: Vec<(f64, f64)> = per_m
            .into_iter()
            .map(|(m, logs)| ((m as f64).log2(), (logs.iter().sum::<f64>() / logs.len() as f64).exp()))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(format!("N {n} × K {k}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

/// Without a GPU: the sweep's host reference (rows of one pass, on every
/// core) against the plain one, then the dispatch (every tile, split-K,
/// padding) at small awkward sizes in the interpreter, against the f64
/// reference.
fn interpreter_check(s: &Stream) -> Res<()> {
    for trans_b in [false, true] {
        let (m, n, k) = (9, 37, 29);
        let a = random_vec::<f16>(5, m * k);
        let b = random_vec::<f16>(6, n * k);
        let rows = [0, 4, 8];
        let got = reference_rows(n, k, &a, &b, trans_b, &rows);
        for (r, got) in rows.iter().zip(&got) {
            let want = kernels::reference_rows(m, n, k, &a, &b, false, trans_b, *r..*r + 1);
            let diff = got.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
            if got.len() != n || diff > 1e-9 {
                return Err(format!("the sweep's reference row {r} (trans_b {trans_b}) is off by {diff:e}").into());
            }
        }
        let x = random_vec::<f16>(7, 1000);
        if rel_diff(&x, &x) != 0.0 || (rel_diff(&x, &random_vec::<f16>(8, 1000)) - 1.4).abs() > 0.2 {
            return Err("the sweep's rel_diff is wrong".into());
        }
    }
    println!("the host reference rows and comparison match the plain ones");
    for (m, n, k, config) in [
        (3, 130, 77, Config { tiles: Tiles::Small, split: 3 }),
        (70, 17, 200, Config { tiles: Tiles::Mid, split: 2 }),
        (5, 64, 96, Config { tiles: Tiles::Small, split: 1 }),
        (1, 200, 333, Config { tiles: Tiles::SmallTwo, split: 2 }),
        (17, 77, 130, Config { tiles: Tiles::Narrow, split: 1 }),
        (1, 300, 1001, Config { tiles: Tiles::Gemv, split: 3 }),
        (9, 100, 203, Config { tiles: Tiles::Thin, split: 2 }),
        (130, 70, 129, Config { tiles: Tiles::Tall, split: 1 }),
    ] {
        for layout in [Layout::Ab, Layout::Abt] {
            let (a_host, a) = random::<f16>(s, 1, &[m, k])?;
            let shape = if layout == Layout::Ab { [k, n] } else { [n, k] };
            let (b_host, b) = random::<f16>(s, 2, &shape)?;
            let want = kernels::reference_rows(m, n, k, &a_host, &b_host, false, layout == Layout::Abt, 0..m);
            for mut g in
                [ShapedGemm::new(s, m, n, k, layout, Some(config))?, ShapedGemm::unpadded(s, m, n, k, layout, config)?]
            {
                let mut c = DeviceTensor::<f16>::zeros(s, &[m, n])?;
                g.run(s, &a, &b, &mut c)?;
                let err = assert_close(&c.to_vec(s)?, &want, f16::TOL)?;
                println!("f16 {layout:?} {m} x {n} x {k} ({}): matches the CPU reference ({err:.1e})", g.describe());
            }
        }
    }
    Ok(())
}

fn main() {
    let o = match Options::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("gemm_sweep: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o) {
        eprintln!("gemm_sweep: {e}");
        std::process::exit(1);
    }
}

/// `--plan`: the configuration, blocks and floor of every shape.
fn print_plan(o: &Options) {
    println!("m,n,k,config,blocks,mbytes,gflop,floor_us,bound,tune_candidates");
    for (m, n, k) in o.shapes() {
        let config = o.config.unwrap_or_else(|| kernels::choose(m, n, k));
        let (bm, bn) = config.tiles.dims();
        let blocks = m.div_ceil(bm) * n.div_ceil(bn) * config.split;
        let bytes = 2.0 * (m * k + n * k + m * n) as f64;
        let flops = 2.0 * (m * n * k) as f64;
        let bound = if bytes / HBM > flops / PEAK { "memory" } else { "compute" };
        let floor_us = (bytes / HBM).max(flops / PEAK) * 1e6;
        let tuned: Vec<String> = kernels::candidates(m, n, k).iter().map(|c| c.to_string()).collect();
        println!(
            "{m},{n},{k},{config},{blocks},{:.1},{:.1},{floor_us:.1},{bound},{}",
            bytes / 1e6,
            flops / 1e9,
            tuned.join(" / ")
        );
    }
}

fn run(o: &Options) -> Res<()> {
    if o.plan {
        print_plan(o);
        return Ok(());
    }
    let device = Device::auto()?;
    let s = device.stream()?;
    println!("gemm_sweep on {}", device.name());
    if device.is_interpreter() {
        println!("no GPU: checking the shape dispatch in the CPU interpreter at small sizes (no timing)");
        return interpreter_check(&s);
    }
    let blas = cublas::Gemm::new(&s)?;
    println!("cuBLAS: {} (version {})", blas.library_name(), blas.version()?);
    // Without embedded cubins every kernel is JIT-compiled from PTX at its
    // first launch (build with TILE_PTXAS: `scripts/dist.sh sweep` does).
    let metas = kernels::matmul::INSTANCES.iter().chain(&kernels::matmul_bt::INSTANCES);
    let (with, all) = metas.fold((0, 0), |(w, a), m| {
        let t = m.targets.iter().filter(|t| t.arch == "sm_90a");
        let n = t.clone().count();
        (w + t.filter(|t| t.cubin.is_some()).count(), a + n)
    });
    println!(
        "kernels: {with} of {all} sm_90a GEMM variants embed a cubin{}; shapes: {} per element type; timing budget {} ms \
         per shape and side; configuration: {}",
        if with < all { " (the others are JIT-compiled at their first launch)" } else { "" },
        o.shapes().len() * o.layouts.len(),
        o.budget_ms,
        match (o.config, o.tune) {
            (Some(c), _) => format!("{c} for every shape"),
            (None, true) => "the autotuner's where the rule is not sure (TILE_TUNE, TILE_CACHE_DIR)".into(),
            (None, false) => "the host rule's".into(),
        }
    );
    let mut out = Output::new(o.csv.as_ref())?;
    for d in &o.dtypes {
        match d.as_str() {
            "bf16" => sweep::<bf16>(&s, &blas, o, &mut out)?,
            _ => sweep::<f16>(&s, &blas, o, &mut out)?,
        }
    }
    let rows = &out.rows;
    if rows.is_empty() {
        return Err("no shapes to run".into());
    }
    let geo = (rows.iter().map(|r| r.ratio().ln()).sum::<f64>() / rows.len() as f64).exp();
    let worst = rows.iter().min_by(|x, y| x.ratio().total_cmp(&y.ratio())).expect("rows");
    let secs = |f: fn(&Row) -> f64| rows.iter().map(f).sum::<f64>() / 1e3;
    println!(
        "RESULT gemm_sweep_summary shapes={} geomean_ratio={geo:.3} min_ratio={:.3} min_shape=\"{} {} {}x{}x{} {}\" \
         seconds={:.0} setup_s={:.1} check_s={:.1} time_s={:.1} partial={}",
        rows.len(),
        worst.ratio(),
        worst.layout_name(),
        worst.dtype,
        worst.m,
        worst.n,
        worst.k,
        worst.described,
        out.start.elapsed().as_secs_f64(),
        secs(|r| r.setup_ms),
        secs(|r| r.check_ms),
        secs(|r| r.time_ms),
        u8::from(out.partial)
    );
    if let Some(p) = &o.csv {
        println!("wrote {}", p.display());
    }
    if let Some(p) = &o.plot {
        plot(rows, p)?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &o.save_tuning {
        tile::tune::Tuner::global()?.save(p)?;
        println!("wrote the tuning choices to {} (ship it as TILE_TUNE_CACHE)", p.display());
    }
    Ok(())
}

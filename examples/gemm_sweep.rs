//! The GEMM sweep: the shapes LLM inference runs, ours against cuBLAS in the
//! same run. GPU only (without a GPU it checks the shape dispatch at small
//! sizes in the CPU interpreter and exits).
//!
//! Shapes: M ∈ {1, 16, 64, 128, 256, 1024, 4096, 8192} against the N × K of
//! real layers (4096 × 4096, 14336 × 4096, 4096 × 14336, 28672 × 8192,
//! 8192 × 8192), plus rows that are not 16-byte multiples (N = 4097, K = 4095,
//! both) at a few M; both layouts (`ab`: `c = a · b`, `b [K, N]`; `abt`:
//! `y = x · wᵀ`, `w [N, K]`) and both element types. Ours is
//! `kernels::ShapedGemm` (the configuration from the host rule
//! `kernels::choose`, which the autotuner will replace).
//!
//! Per shape: ours against cuBLAS (relative L2 error over the whole output),
//! and on two rows against an f64 CPU reference (when N·K ≤ 2^26); then both
//! timed (median), TFLOPS and the ratio, and the floor: the time to move the
//! operands and the output once at 4.8 TB/s or to do the FLOPs at 989
//! dense TFLOPS, whichever is longer (the H200's figures). One `RESULT
//! gemm_sweep ...` line per shape, then the geometric mean and the minimum
//! of the ratios (`RESULT gemm_sweep_summary`).
//!
//! `cargo run --release --example gemm_sweep -- [options]`:
//! - `--m 1,16,..`, `--nk 4096x4096,..` (N×K), `--odd` / `--no-odd` (the odd
//!   shapes only / not), `--layout ab|abt[,..]`, `--dtype f16|bf16[,..]`;
//! - `--config TILES:SPLIT` (`64x128`, `128x128` or `128x256`, e.g.
//!   `64x128:4`): every shape with this configuration instead of the rule's;
//! - `--csv PATH`, `--plot PATH` (an SVG of the ratio against M, one line per
//!   N × K);
//! - `--quick`: fewer timed runs;
//! - `--plan`: print each shape's configuration, blocks, bytes, FLOPs and
//!   floor without running anything (no GPU needed).
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use tile::cublas;
use tile::prelude::*;

#[path = "kernels/common.rs"]
mod common;
#[path = "kernels/gemm.rs"]
mod kernels;
use kernels::{Config, GemmElement, Layout, ShapedGemm, Tiles};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The H200's HBM bandwidth (bytes/s) and dense fp16/bf16 tensor peak (FLOP/s).
const HBM: f64 = 4.8e12;
const PEAK: f64 = 989e12;

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
    csv: Option<PathBuf>,
    plot: Option<PathBuf>,
    quick: bool,
    plan: bool,
}

const USAGE: &str = "usage: gemm_sweep [--m M,..] [--nk NxK,..] [--odd|--no-odd] [--layout ab|abt,..] \
                     [--dtype f16|bf16,..] [--config TILES:SPLIT] [--csv PATH] [--plot PATH] [--quick] [--plan]";

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
            csv: None,
            plot: None,
            quick: false,
            plan: false,
        };
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
                    let parsed = v.split_once(':').and_then(|(t, s)| {
                        let tiles = [Tiles::Small, Tiles::Mid, Tiles::Wide].into_iter().find(|x| x.name() == t)?;
                        Some(Config { tiles, split: s.parse().ok().filter(|&s: &usize| (1..=64).contains(&s))? })
                    });
                    o.config = Some(parsed.ok_or(format!("--config: `{v}` is not TILES:SPLIT (e.g. 64x128:4)"))?);
                }
                "--csv" => o.csv = Some(value("--csv")?.into()),
                "--plot" => o.plot = Some(value("--plot")?.into()),
                "--quick" => o.quick = true,
                "--plan" => o.plan = true,
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
    ours_us: f64,
    cublas_us: f64,
    floor_us: f64,
    err: f64,
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

/// Random values in [-1, 1) as `T`, on the device with shape `shape`.
fn random<T: Element>(s: &Stream, seed: u64, shape: &[usize]) -> Res<(Vec<T>, DeviceTensor<T>)> {
    let mut rng = common::Rng::new(seed);
    let n: usize = shape.iter().product();
    let host: Vec<T> = rng.vec(n, -1.0, 1.0).into_iter().map(|v| T::from_f64(v as f64)).collect();
    let dev = DeviceTensor::from_slice(s, &host, shape)?;
    Ok((host, dev))
}

/// Relative L2 difference of two outputs, in one pass.
fn rel_diff<T: Element>(x: &[T], y: &[T]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in x.iter().zip(y) {
        let (a, b) = (a.to_f64(), b.to_f64());
        num += (a - b) * (a - b);
        den += b * b;
    }
    if !num.is_finite() {
        return f64::INFINITY;
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// The sweep for one element type over every (N, K) and M.
fn sweep<T: Dtype>(s: &Stream, blas: &cublas::Gemm, o: &Options, rows: &mut Vec<Row>) -> Res<()> {
    let shapes = o.shapes();
    // One pair of operands per (N, K) (the largest M), reused for every M
    // and layout: the time goes to the GEMMs, not to the host's RNG.
    let mut nks: Vec<(usize, usize)> = shapes.iter().map(|&(_, n, k)| (n, k)).collect();
    nks.dedup();
    for (n, k) in nks {
        let m_max = shapes.iter().filter(|s| (s.1, s.2) == (n, k)).map(|s| s.0).max().unwrap_or(1);
        let mut rng = common::Rng::new((n * 3 + k) as u64);
        let a_host: Vec<T> = (0..m_max * k).map(|_| T::from_f64(rng.uniform(-1.0, 1.0) as f64)).collect();
        let (w_host, w_flat) = random::<T>(s, (n + k * 5) as u64, &[n * k])?;
        let mut w_flat = Some(w_flat);
        for &layout in &o.layouts {
            let shape = match layout {
                Layout::Ab => [k, n],
                Layout::Abt => [n, k],
            };
            let w = w_flat.take().expect("the weights").reshape(&shape)?;
            for &(m, n2, k2) in &shapes {
                if (n2, k2) != (n, k) {
                    continue;
                }
                // The first m rows of the random a (a contiguous prefix).
                let a = DeviceTensor::from_slice(s, &a_host[..m * k], &[m, k])?;
                let row = measure::<T>(s, blas, o, layout, m, n, k, &a, &a_host[..m * k], &w, &w_host)?;
                println!(
                    "RESULT gemm_sweep layout={} dtype={} m={m} n={n} k={k} config=\"{}\" blocks={} ours_us={:.1} cublas_us={:.1} \
                     floor_us={:.1} ours_tflops={:.1} cublas_tflops={:.1} ratio={:.3} err={:.1e}",
                    row.layout_name(),
                    T::NAME,
                    row.config,
                    row.blocks(),
                    row.ours_us,
                    row.cublas_us,
                    row.floor_us,
                    row.flops() / row.ours_us / 1e6,
                    row.flops() / row.cublas_us / 1e6,
                    row.ratio(),
                    row.err
                );
                rows.push(row);
            }
            w_flat = Some(w.reshape(&[n * k])?);
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
    n: usize,
    k: usize,
    a: &DeviceTensor<T>,
    a_host: &[T],
    w: &DeviceTensor<T>,
    w_host: &[T],
) -> Res<Row> {
    let trans_b = layout == Layout::Abt;
    let mut ours = ShapedGemm::<T>::new(s, m, n, k, layout, o.config)?;
    let mut c = DeviceTensor::from_slice(s, &vec![T::from_f64(f64::NAN); m * n], &[m, n])?;
    let mut c_blas = DeviceTensor::<T>::zeros(s, &[m, n])?;
    ours.run(s, a, w, &mut c)?;
    blas.gemm(m, n, k, a, w, &mut c_blas, false, trans_b)?;
    let got = c.to_vec(s)?;
    let want = c_blas.to_vec(s)?;
    let err = rel_diff(&got, &want);
    let what = format!("{} {} {m}x{n}x{k} ({})", T::NAME, if trans_b { "abt" } else { "ab" }, ours.config);
    if err > T::TOL {
        return Err(format!("{what}: ours and cuBLAS differ by {err:.2e} (> {:.0e})", T::TOL).into());
    }
    if n * k <= 1 << 26 {
        let sample = [0, m - 1];
        for &r in &sample[..if m > 1 { 2 } else { 1 }] {
            let want = kernels::reference_rows(m, n, k, a_host, w_host, false, trans_b, r..r + 1);
            assert_close(&got[r * n..(r + 1) * n], &want, T::TOL)
                .map_err(|e| format!("{what}, row {r} against the f64 reference: {e}"))?;
        }
    }
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let (warmup, iters) = match (flops > 1e12, o.quick) {
        (true, true) => (2, 5),
        (true, false) => (3, 10),
        (false, true) => (5, 20),
        (false, false) => (20, 100),
    };
    let t_ours = bench(s, warmup, iters, || ours.run(s, a, w, &mut c))?;
    let t_blas = bench(s, warmup, iters, || blas.gemm(m, n, k, a, w, &mut c_blas, false, trans_b))?;
    let bytes = 2.0 * (m * k + n * k + m * n) as f64;
    let floor_us = (bytes / HBM).max(flops / PEAK) * 1e6;
    Ok(Row {
        layout,
        dtype: T::NAME,
        m,
        n,
        k,
        config: ours.config,
        ours_us: t_ours.median_ms * 1e3,
        cublas_us: t_blas.median_ms * 1e3,
        floor_us,
        err,
    })
}

fn write_csv(rows: &[Row], path: &PathBuf) -> Res<()> {
    let mut out = String::from(
        "layout,dtype,m,n,k,config,blocks,ours_us,cublas_us,floor_us,ours_tflops,cublas_tflops,ratio,floor_over_ours,rel_diff\n",
    );
    for r in rows {
        writeln!(
            out,
            "{},{},{},{},{},{},{},{:.2},{:.2},{:.2},{:.2},{:.2},{:.4},{:.4},{:.2e}",
            r.layout_name(),
            r.dtype,
            r.m,
            r.n,
            r.k,
            r.config,
            r.blocks(),
            r.ours_us,
            r.cublas_us,
            r.floor_us,
            r.flops() / r.ours_us / 1e6,
            r.flops() / r.cublas_us / 1e6,
            r.ratio(),
            r.floor_us / r.ours_us,
            r.err
        )?;
    }
    std::fs::write(path, out)?;
    Ok(())
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

/// Without a GPU: the dispatch (every tile, split-K, padding) at small
/// awkward sizes in the interpreter, against the f64 reference.
fn interpreter_check(s: &Stream) -> Res<()> {
    for (m, n, k, config) in [
        (3, 130, 77, Config { tiles: Tiles::Small, split: 3 }),
        (70, 17, 200, Config { tiles: Tiles::Mid, split: 2 }),
        (5, 64, 96, Config { tiles: Tiles::Small, split: 1 }),
    ] {
        for layout in [Layout::Ab, Layout::Abt] {
            let (a_host, a) = random::<f16>(s, 1, &[m, k])?;
            let shape = if layout == Layout::Ab { [k, n] } else { [n, k] };
            let (b_host, b) = random::<f16>(s, 2, &shape)?;
            let mut c = DeviceTensor::<f16>::zeros(s, &[m, n])?;
            ShapedGemm::new(s, m, n, k, layout, Some(config))?.run(s, &a, &b, &mut c)?;
            let want = kernels::reference_rows(m, n, k, &a_host, &b_host, false, layout == Layout::Abt, 0..m);
            let err = assert_close(&c.to_vec(s)?, &want, f16::TOL)?;
            println!("f16 {layout:?} {m} x {n} x {k} ({config}): matches the CPU reference ({err:.1e})");
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
    println!("m,n,k,config,blocks,mbytes,gflop,floor_us,bound");
    for (m, n, k) in o.shapes() {
        let config = o.config.unwrap_or_else(|| kernels::choose(m, n, k));
        let (bm, bn) = config.tiles.dims();
        let blocks = m.div_ceil(bm) * n.div_ceil(bn) * config.split;
        let bytes = 2.0 * (m * k + n * k + m * n) as f64;
        let flops = 2.0 * (m * n * k) as f64;
        let bound = if bytes / HBM > flops / PEAK { "memory" } else { "compute" };
        let floor_us = (bytes / HBM).max(flops / PEAK) * 1e6;
        println!("{m},{n},{k},{config},{blocks},{:.1},{:.1},{floor_us:.1},{bound}", bytes / 1e6, flops / 1e9);
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
    let start = std::time::Instant::now();
    let mut rows = Vec::new();
    for d in &o.dtypes {
        match d.as_str() {
            "bf16" => sweep::<bf16>(&s, &blas, o, &mut rows)?,
            _ => sweep::<f16>(&s, &blas, o, &mut rows)?,
        }
    }
    if rows.is_empty() {
        return Err("no shapes to run".into());
    }
    let geo = (rows.iter().map(|r| r.ratio().ln()).sum::<f64>() / rows.len() as f64).exp();
    let worst = rows.iter().min_by(|x, y| x.ratio().total_cmp(&y.ratio())).expect("rows");
    println!(
        "RESULT gemm_sweep_summary shapes={} geomean_ratio={geo:.3} min_ratio={:.3} min_shape=\"{} {} {}x{}x{} {}\" seconds={:.0}",
        rows.len(),
        worst.ratio(),
        worst.layout_name(),
        worst.dtype,
        worst.m,
        worst.n,
        worst.k,
        worst.config,
        start.elapsed().as_secs_f64()
    );
    if let Some(p) = &o.csv {
        write_csv(&rows, p)?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &o.plot {
        plot(&rows, p)?;
        println!("wrote {}", p.display());
    }
    Ok(())
}

//! FlashAttention forward (`kernels/flash_attention.rs`): a correctness
//! check, a benchmark against PyTorch SDPA, and raw dumps for a check
//! against SDPA in float32.
//!
//! ```text
//! cargo run --release --example flash_attention [--features gpu] -- [MODE]
//!   (none)            check every combination (layouts, dtypes, head dims,
//!                     causal, GQA, s_q != s_k) against a CPU f64 reference:
//!                     moderate sizes on a GPU, small ones in the interpreter
//!   --bench [SET]     time our kernels on the shapes of SET (acceptance,
//!                     sweep or all: the default; or shape specs joined by
//!                     commas, e.g. for a profiler), with a sampled check of each;
//!       --peers CSV   PyTorch SDPA timings of the same shapes (written by
//!                     scripts/attention_peers.py): the table gets ratios
//!       --csv PATH    write the merged table (ours and the peers) as CSV
//!       --plot PATH   plot TFLOPS against sequence length of the sweep
//!                     (SVG), one line per implementation and masking
//!   --replot CSV SVG  plot a CSV written by --csv again (no GPU needed)
//!   --list-shapes [SET]  print the shapes of SET, one spec a line
//!                     (dtype:b:h:h_kv:s_q:s_k:d:causal), for the peers script
//!   --dump DIR SPEC.. run each spec (dtype:b:h:h_kv:s_q:s_k:d:causal[:bshd])
//!                     on random inputs and write q, k, v,
//!                     o (raw little-endian), lse (f32) and meta.txt into
//!                     DIR/<n>/ for scripts/attention_check.py
//! ```
//!
//! FLOPs are `4·b·h·s_q·s_k·d`, halved when causal. Every benchmark line is
//! also printed as `RESULT attention ...`, with the schedule of the variant
//! that ran. On an H200 the head-dim 128 instances run the persistent
//! warp-specialized loop (`warp_specialized_loop_persistent`, one block per
//! SM taking tiles from a dynamic scheduler, heaviest causal rows first; on
//! by default, `CompileOptions::wsloop_persistent`; `TILE_PERSISTENT_STATIC=1`
//! takes them by a static stride, `TILE_SKIP_SCHEDULES=warp_specialized_loop_persistent`
//! runs the plain variant), head dim 256 the plain warp-specialized loop
//! over 128 x 80 blocks (`warp_specialized_loop`, one block per tile: its
//! fragments do not fit the persistent variant's registers; P·V deferred,
//! O's rescale under the next Q·Kᵀ), and head dim 64 three consumer
//! warpgroups over 192 x 128 blocks, persistent too (causal: the TMA-copy
//! instance of 128 threads over 64 x 128 blocks); its shapes also time d64's other
//! instances (`ours_64x64`, `ours_64x128`: TMA copy, 128 threads;
//! `ours_192x128`; `ours_192x64`: three warpgroups, P·V deferred) on lines
//! of their own, not in the CSV.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use tile::prelude::*;

#[path = "kernels/common.rs"]
mod common;
#[path = "kernels/flash_attention.rs"]
mod kernels;

use kernels::{AttentionElement, Case, Inputs, Layout};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A benchmark shape: an element type and a case (bhsd).
#[derive(Copy, Clone, Debug, PartialEq)]
struct Shape {
    dtype: &'static str,
    case: Case,
}

impl Shape {
    fn new(dtype: &'static str, b: usize, h: usize, s: usize, d: usize, causal: bool) -> Shape {
        Shape { dtype, case: Case { layout: Layout::Bhsd, b, h, h_kv: h, s_q: s, s_k: s, d, causal } }
    }
    fn spec(&self) -> String {
        let c = &self.case;
        let layout = if c.layout == Layout::Bshd { ":bshd" } else { "" };
        format!("{}:{}:{}:{}:{}:{}:{}:{}{layout}", self.dtype, c.b, c.h, c.h_kv, c.s_q, c.s_k, c.d, u8::from(c.causal))
    }
    fn parse(spec: &str) -> Res<Shape> {
        let f: Vec<&str> = spec.split(':').collect();
        if f.len() != 8 && f.len() != 9 {
            return Err(format!("bad shape spec `{spec}`: expected dtype:b:h:h_kv:s_q:s_k:d:causal[:layout]").into());
        }
        let layout = match f.get(8) {
            None | Some(&"bhsd") => Layout::Bhsd,
            Some(&"bshd") => Layout::Bshd,
            Some(other) => return Err(format!("bad layout `{other}` in `{spec}`: bhsd or bshd").into()),
        };
        let dtype = match f[0] {
            "f16" => "f16",
            "bf16" => "bf16",
            other => return Err(format!("bad dtype `{other}` in `{spec}`: f16 or bf16").into()),
        };
        let n: Vec<usize> = f[1..8].iter().map(|x| x.parse()).collect::<Result<_, _>>()?;
        let case = Case { layout, b: n[0], h: n[1], h_kv: n[2], s_q: n[3], s_k: n[4], d: n[5], causal: n[6] != 0 };
        Ok(Shape { dtype, case })
    }
    fn label(&self) -> String {
        let c = &self.case;
        let kv = if c.h_kv != c.h { format!(" hkv{}", c.h_kv) } else { String::new() };
        let s = if c.s_q == c.s_k { format!("s{}", c.s_q) } else { format!("sq{} sk{}", c.s_q, c.s_k) };
        let mask = if c.causal { "causal" } else { "full" };
        format!("{} b{} h{}{kv} {s} d{} {mask}", self.dtype, c.b, c.h, c.d)
    }
}

/// The acceptance shapes of issue 9 and the d128 sweep of the plot
/// (16k tokens per batch, 16 heads), each causal and not.
fn shapes(set: &str) -> Res<Vec<Shape>> {
    if set.contains(':') {
        return set.split(',').map(Shape::parse).collect();
    }
    let mut out = vec![];
    for causal in [false, true] {
        if set == "acceptance" || set == "all" {
            out.push(Shape::new("f16", 4, 32, 4096, 128, causal));
            out.push(Shape::new("f16", 8, 16, 2048, 64, causal));
            out.push(Shape::new("f16", 2, 16, 4096, 256, causal));
            out.push(Shape::new("bf16", 2, 16, 8192, 128, causal));
        }
        if set == "sweep" || set == "all" {
            for s in [512, 1024, 2048, 4096, 8192, 16384] {
                out.push(Shape::new("f16", (16384 / s).max(1), 16, s, 128, causal));
            }
        }
        if !matches!(set, "acceptance" | "sweep" | "all") {
            return Err(format!("unknown shape set `{set}`: acceptance, sweep or all").into());
        }
    }
    Ok(out)
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let set_after = |name: &str| {
        let i = args.iter().position(|a| a == name)?;
        args.get(i + 1).filter(|a| !a.starts_with("--")).cloned()
    };
    if args.iter().any(|a| a == "--list-shapes") {
        for s in shapes(&set_after("--list-shapes").unwrap_or_else(|| "all".into()))? {
            println!("{}", s.spec());
        }
        return Ok(());
    }
    if let Some(i) = args.iter().position(|a| a == "--replot") {
        let (csv, svg) = (args.get(i + 1).ok_or("--replot CSV SVG")?, args.get(i + 2).ok_or("--replot CSV SVG")?);
        plot_sweep(&read_csv(Path::new(csv))?, Path::new(svg))?;
        println!("wrote {svg}");
        return Ok(());
    }
    let device = Device::auto()?;
    let stream = device.stream()?;
    println!("flash_attention on {}", device.name());
    if let Some(i) = args.iter().position(|a| a == "--dump") {
        let dir = args.get(i + 1).ok_or("--dump needs a directory")?;
        let specs: Vec<Shape> = args[i + 2..].iter().map(|s| Shape::parse(s)).collect::<Res<_>>()?;
        for (n, s) in specs.iter().enumerate() {
            dump_case(&stream, s, &Path::new(dir).join(n.to_string()))?;
        }
        return Ok(());
    }
    if args.iter().any(|a| a == "--bench") {
        if device.is_interpreter() {
            println!("--bench needs a GPU");
            return Ok(());
        }
        let set = set_after("--bench").unwrap_or_else(|| "all".into());
        let peers = match flag("--peers") {
            Some(p) => read_peers(Path::new(&p))?,
            None => BTreeMap::new(),
        };
        return bench_all(&device, &stream, &shapes(&set)?, &peers, flag("--csv"), flag("--plot"));
    }
    check_all(&device, &stream)
}

/// Every combination against the CPU reference (all rows).
fn check_all(device: &Device, stream: &Stream) -> Res<()> {
    let small = device.is_interpreter();
    let (sq, sk) = if small { (70, 45) } else { (333, 517) };
    let mut n = 0;
    for layout in [Layout::Bhsd, Layout::Bshd] {
        for d in kernels::HEAD_DIMS {
            for causal in [false, true] {
                for (h, h_kv, s_q, s_k) in [(4, 4, sk, sk), (4, 2, sq, sk), (2, 1, sk, sq)] {
                    let c = Case { layout, b: 2, h, h_kv, s_q, s_k, d, causal };
                    let e16 = check_one::<f16>(stream, &c, 1)?;
                    let eb16 = check_one::<bf16>(stream, &c, 2)?;
                    println!("{c:?}: f16 error {:.1e}, bf16 {:.1e}", e16, eb16);
                    n += 2;
                }
            }
        }
    }
    println!("{n} cases correct");
    Ok(())
}

fn check_one<T: AttentionElement>(stream: &Stream, c: &Case, seed: u64) -> Res<f64> {
    let mut x = Inputs::<T>::new(stream, c, seed)?;
    x.run(stream, c)?;
    let tol = if T::DTYPE == tile::ir::DType::BF16 { 2e-2 } else { 5e-3 };
    Ok(x.check(stream, c, None, tol)?.0)
}

/// Times one shape of ours: correctness on sampled rows first, then
/// `tile::bench` (median of 30 after 5 warm-ups); returns the median and
/// the schedules of the variants that ran (`Device::launch_counts`).
fn bench_ours<T: AttentionElement>(device: &Device, stream: &Stream, c: &Case) -> Res<(f64, String)> {
    bench_tiles::<T>(device, stream, c, kernels::Tiles::Auto)
}

/// [`bench_ours`] with the instance `tiles` picks.
fn bench_tiles<T: AttentionElement>(
    device: &Device,
    stream: &Stream,
    c: &Case,
    tiles: kernels::Tiles,
) -> Res<(f64, String)> {
    let mut x = Inputs::<T>::new(stream, c, 7)?;
    x.run_with(stream, c, tiles)?;
    let mut rng = common::Rng::new(3);
    let rows: Vec<(usize, usize, usize)> = (0..24)
        .map(|_| {
            let pick = |n: usize, rng: &mut common::Rng| (rng.next_u64() % n as u64) as usize;
            (pick(c.b, &mut rng), pick(c.h, &mut rng), pick(c.s_q, &mut rng))
        })
        .chain([(0, 0, 0), (c.b - 1, c.h - 1, c.s_q - 1)])
        .collect();
    let tol = if T::DTYPE == tile::ir::DType::BF16 { 2e-2 } else { 5e-3 };
    x.check(stream, c, Some(&rows), tol)?;
    let (_, meta) = T::instance_for(stream, c.layout, c.d, tiles, c.causal).ok_or("no instance")?;
    let before = device.launch_counts(meta);
    let t = bench(stream, 5, 30, || x.run_with(stream, c, tiles))?;
    let after = device.launch_counts(meta);
    let schedule = meta
        .targets
        .iter()
        .zip(after.iter().zip(before.iter().chain(std::iter::repeat(&0))))
        .filter(|(_, (a, b))| *a > *b)
        .map(|(t, _)| t.schedule)
        .collect::<Vec<_>>()
        .join("+");
    Ok((t.median_ms, schedule))
}

type Peers = BTreeMap<(String, String), f64>;

/// `impl,spec,ms` lines of the peers script.
fn read_peers(path: &Path) -> Res<Peers> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() >= 3 {
            if let Ok(ms) = f[2].trim().parse::<f64>() {
                out.insert((f[0].to_string(), f[1].to_string()), ms);
            }
        }
    }
    Ok(out)
}

/// The rows of a CSV written by `--csv`.
fn read_csv(path: &Path) -> Res<Vec<(Shape, String, f64)>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = vec![];
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 10 {
            return Err(format!("{}: bad line `{line}`", path.display()).into());
        }
        let shape = Shape::parse(&f[1..9].join(":"))?;
        out.push((shape, f[0].to_string(), f[9].parse()?));
    }
    Ok(out)
}

fn tflops(c: &Case, ms: f64) -> f64 {
    c.flops() / (ms * 1e-3) / 1e12
}

fn bench_all(
    device: &Device,
    stream: &Stream,
    shapes: &[Shape],
    peers: &Peers,
    csv: Option<String>,
    plot: Option<String>,
) -> Res<()> {
    let peer_names: Vec<String> = {
        let mut v: Vec<String> = peers.keys().map(|(i, _)| i.clone()).collect();
        v.dedup();
        v
    };
    let mut rows: Vec<(Shape, String, f64)> = vec![];
    let mut failed: Vec<String> = vec![];
    let mut table = String::new();
    write!(table, "{:<34} {:>9} {:>8}", "shape", "ours ms", "TFLOPS")?;
    for p in &peer_names {
        write!(table, " {:>14} {:>7}", format!("{p} TFLOPS"), "ratio")?;
    }
    println!("{table}");
    for s in shapes {
        let c = &s.case;
        let result = match s.dtype {
            "bf16" => bench_ours::<bf16>(device, stream, c),
            _ => bench_ours::<f16>(device, stream, c),
        };
        let (ms, schedule) = match result {
            Ok(r) => r,
            Err(e) => {
                println!("{:<34} FAILED: {e}", s.label());
                println!("RESULT attention shape={} impl=ours status=failed", s.spec());
                failed.push(s.label());
                continue;
            }
        };
        let ours = tflops(c, ms);
        rows.push((*s, "ours".into(), ms));
        let mut line = format!("{:<34} {ms:>9.3} {ours:>8.1}", s.label());
        let mut result = format!("RESULT attention shape={} ours_tflops={ours:.1} schedule={schedule}", s.spec());
        for p in &peer_names {
            match peers.get(&(p.clone(), s.spec())) {
                Some(&pms) => {
                    let pt = tflops(c, pms);
                    write!(line, " {pt:>14.1} {:>7.3}", ours / pt)?;
                    write!(result, " {p}_tflops={pt:.1} ratio_{p}={:.3}", ours / pt)?;
                    rows.push((*s, p.clone(), pms));
                }
                None => write!(line, " {:>14} {:>7}", "-", "-")?,
            }
        }
        println!("{line}  [{schedule}]");
        println!("{result}");
        // The head dim's other instances beside it (d64: the TMA-copy 64 x
        // 64 one and the three-warpgroup 192 x 64 one), for comparison;
        // not in the CSV.
        let default = match s.dtype {
            "bf16" => <bf16 as AttentionElement>::instance_for(stream, c.layout, c.d, kernels::Tiles::Auto, c.causal)
                .map(|(_, m)| m.name),
            _ => <f16 as AttentionElement>::instance_for(stream, c.layout, c.d, kernels::Tiles::Auto, c.causal)
                .map(|(_, m)| m.name),
        };
        let others: Vec<((usize, usize), &str)> = match s.dtype {
            "bf16" => {
                <bf16 as AttentionElement>::blocks(c.layout, c.d).into_iter().map(|(b, _, m)| (b, m.name)).collect()
            }
            _ => <f16 as AttentionElement>::blocks(c.layout, c.d).into_iter().map(|(b, _, m)| (b, m.name)).collect(),
        };
        for ((bm, bn), name) in others {
            if c.d != 64 || Some(name) == default {
                continue;
            }
            let tiles = kernels::Tiles::Blocks(bm, bn);
            let r = match s.dtype {
                "bf16" => bench_tiles::<bf16>(device, stream, c, tiles),
                _ => bench_tiles::<f16>(device, stream, c, tiles),
            };
            match r {
                Ok((ms, schedule)) => {
                    let t = tflops(c, ms);
                    println!("{:<34} {ms:>9.3} {t:>8.1}  [{schedule}, {bm} x {bn}]", format!("  {bm}x{bn}"));
                    println!(
                        "RESULT attention shape={} impl=ours_{bm}x{bn} ours_tflops={t:.1} schedule={schedule}",
                        s.spec()
                    );
                }
                Err(e) => println!("RESULT attention shape={} impl=ours_{bm}x{bn} status=failed ({e})", s.spec()),
            }
        }
    }
    if let Some(path) = csv {
        let mut text = String::from("impl,dtype,b,h,h_kv,s_q,s_k,d,causal,ms,tflops\n");
        for (s, imp, ms) in &rows {
            let c = &s.case;
            writeln!(
                text,
                "{imp},{},{},{},{},{},{},{},{},{ms:.4},{:.2}",
                s.dtype,
                c.b,
                c.h,
                c.h_kv,
                c.s_q,
                c.s_k,
                c.d,
                u8::from(c.causal),
                tflops(c, *ms)
            )?;
        }
        std::fs::write(&path, text)?;
        println!("wrote {path}");
    }
    if let Some(path) = plot {
        plot_sweep(&rows, Path::new(&path))?;
        println!("wrote {path}");
    }
    if !failed.is_empty() {
        return Err(format!("{} shapes failed (wrong or not launched): {}", failed.len(), failed.join("; ")).into());
    }
    Ok(())
}

/// TFLOPS against sequence length of the f16 d128 shapes with 16 heads
/// (the sweep), one line per implementation and masking.
fn plot_sweep(rows: &[(Shape, String, f64)], path: &Path) -> Res<()> {
    use plotters::prelude::*;
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (s, imp, ms) in rows {
        let c = &s.case;
        if s.dtype == "f16" && c.d == 128 && c.h == 16 && c.b * c.s_q == 16384.max(c.s_q) {
            let name = format!("{imp} {}", if c.causal { "causal" } else { "full" });
            lines.entry(name).or_default().push(((c.s_q as f64).log2(), tflops(c, *ms)));
        }
    }
    let top = lines.values().flatten().map(|p| p.1).fold(0.0, f64::max) * 1.1 + 1.0;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("FlashAttention forward, f16, d128, 16k tokens, 16 heads", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(8.8f64..14.2f64, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("sequence length")
        .y_desc("TFLOPS")
        .x_labels(6)
        .x_label_formatter(&|x| format!("{}", 2f64.powf(x.round()) as u64))
        .draw()?;
    // One color per implementation; causal lines thinner and lighter.
    let impls: Vec<String> = {
        let mut v: Vec<String> = lines.keys().map(|k| k.split(' ').next().unwrap_or("").to_string()).collect();
        v.dedup();
        v
    };
    for (name, mut pts) in lines {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let n = impls.iter().position(|i| name.starts_with(i.as_str())).unwrap_or(0);
        let causal = name.ends_with("causal");
        let base = match name.split(' ').next() {
            Some("ours") => RGBColor(214, 39, 40),
            Some("cudnn") => RGBColor(31, 119, 180),
            Some("flash") => RGBColor(44, 160, 44),
            _ => {
                let c = Palette99::pick(n).to_rgba();
                RGBColor(c.0, c.1, c.2)
            }
        };
        let color = base.mix(if causal { 0.5 } else { 1.0 });
        let style = color.stroke_width(if causal { 2 } else { 3 });
        chart
            .draw_series(LineSeries::new(pts.clone(), style))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

/// Runs one shape on random inputs and writes what `scripts/attention_check.py`
/// reads: `q.bin k.bin v.bin o.bin` (the element type's raw little-endian
/// bits, in the spec's layout), `lse.bin` (f32 `[b, h, s_q]`) and `meta.txt`
/// (the spec).
fn dump_case(stream: &Stream, s: &Shape, dir: &Path) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    fn write<T: AttentionElement>(stream: &Stream, c: &Case, dir: &Path) -> Res<()> {
        let mut x = Inputs::<T>::new(stream, c, 11)?;
        x.run(stream, c)?;
        let bits = |v: &[T]| -> Vec<u8> {
            v.iter().flat_map(|e| (bf16_or_f16_bits(e.to_f64(), T::DTYPE)).to_le_bytes()).collect()
        };
        std::fs::write(dir.join("q.bin"), bits(&x.q))?;
        std::fs::write(dir.join("k.bin"), bits(&x.k))?;
        std::fs::write(dir.join("v.bin"), bits(&x.v))?;
        std::fs::write(dir.join("o.bin"), bits(&x.o.to_vec(stream)?))?;
        let lse: Vec<u8> = x.lse.to_vec(stream)?.iter().flat_map(|e| e.to_le_bytes()).collect();
        std::fs::write(dir.join("lse.bin"), lse)?;
        Ok(())
    }
    match s.dtype {
        "bf16" => write::<bf16>(stream, &s.case, dir)?,
        _ => write::<f16>(stream, &s.case, dir)?,
    }
    std::fs::write(dir.join("meta.txt"), format!("{}\n", s.spec()))?;
    println!("dumped {} into {}", s.label(), dir.display());
    Ok(())
}

/// The 16 bits of `x` (exactly representable) as f16 or bf16.
fn bf16_or_f16_bits(x: f64, dtype: tile::ir::DType) -> u16 {
    if dtype == tile::ir::DType::BF16 {
        bf16::from_f64(x).to_bits()
    } else {
        f16::from_f64(x).to_bits()
    }
}

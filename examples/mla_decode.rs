//! DeepSeek MLA decode (`kernels/mla_decode.rs`): a correctness check, a
//! benchmark (issue 13, item 8) beside the device's copy bandwidth, and raw
//! dumps for a check against PyTorch in float32.
//!
//! ```text
//! cargo run --release --example mla_decode [--features gpu] -- [MODE]
//!   (none)            check paged and contiguous, f16 and bf16, s_q 1 and 2,
//!                     h_q 16, 20, 64, 128, ragged seqlens (0, 1, 63, 64, 65,
//!                     ..) against the CPU f64 reference: moderate sizes on a
//!                     GPU, small ones in the interpreter
//!   --bench [SET]     time split + combine (and the scheduler apart) on the
//!                     shapes of SET (acceptance, sweep or all: the default;
//!                     or specs dtype:b:h_q:s_q:ctx:lengths separated by commas),
//!                     with a sampled check of each, beside the copy bandwidth
//!                     of a DSL copy kernel measured in the same run;
//!       --peers CSV   peer timings (scripts/mla_peers.py: FlashMLA if it is
//!                     installed, PyTorch's clone as a copy bandwidth); a
//!                     peer's TFLOPS and GB/s count the keys it ran (its own
//!                     ragged draws, the CSV's `sum_seqlen`)
//!       --csv PATH    write the table (ours and the peers) as CSV
//!       --plot PATH   plot TFLOPS against context (SVG), one line per
//!                     batch and dtype (h_q 128, s_q 1, uniform lengths)
//!       MLA_CHUNK_ORDER=batch  run the chunks in batch order instead of
//!                     longest first (to compare the two)
//!       MLA_TILES=pairs  Hopper's split kernel in clusters of two row
//!                     blocks (`Tiles::HopperPairs`: each key block loaded
//!                     once per pair, multicast) instead of `Tiles::Auto`;
//!                     MLA_TILES=seesaw the seesaw kernel (`Tiles::Seesaw`:
//!                     two key blocks per iteration, one per warpgroup)
//!   --replot CSV SVG  plot a CSV written by --csv again (no GPU needed)
//!   --list-shapes [SET]  print the shapes of SET, one spec a line
//!                     (dtype:b:h_q:s_q:ctx:lengths, lengths uniform|ragged)
//!   --dump DIR SPEC.. run each spec (dtype:b:h_q:s_q:ctx:lengths[:contiguous])
//!                     and write q, the keys, seqlens, out, lse (raw
//!                     little-endian) and meta.txt into DIR/<n>/ for
//!                     scripts/mla_check.py
//! ```
//!
//! FLOPs `2·s_q·Σseqlen·h_q·(576 + 512)`, bytes `(Σseqlen·576 +
//! b·s_q·h_q·(576 + 512))·2` (the issue's). Ragged lengths are uniform in
//! `[ctx/2, 3·ctx/2)` (mean ctx). Every benchmark line is also printed as
//! `RESULT mla ...`.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use tile::prelude::*;

#[path = "kernels/common.rs"]
mod common;
#[path = "kernels/mla_decode.rs"]
mod kernels;

use kernels::{Case, Inputs, MlaElement, Tiles};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A streaming copy: the device's copy bandwidth for the table.
#[tile_kernel(threads = 256, consts(BLOCK = 4096))]
pub fn mla_copy(a: &Tensor<f16, N>, b: &mut Tensor<f16, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut x = fragment::<f16, BLOCK>();
    copy(a.tile([bx * BLOCK]), &mut x);
    copy(&x, b.tile([bx * BLOCK]));
}

/// A benchmark shape.
#[derive(Copy, Clone, Debug, PartialEq)]
struct Shape {
    dtype: &'static str,
    b: usize,
    h_q: usize,
    s_q: usize,
    ctx: usize,
    ragged: bool,
    paged: bool,
}

impl Shape {
    fn spec(&self) -> String {
        let lengths = if self.ragged { "ragged" } else { "uniform" };
        let kv = if self.paged { "" } else { ":contiguous" };
        format!("{}:{}:{}:{}:{}:{lengths}{kv}", self.dtype, self.b, self.h_q, self.s_q, self.ctx)
    }
    fn parse(spec: &str) -> Res<Shape> {
        let f: Vec<&str> = spec.split(':').collect();
        if f.len() != 6 && f.len() != 7 {
            return Err(format!("bad shape spec `{spec}`: expected dtype:b:h_q:s_q:ctx:lengths[:contiguous]").into());
        }
        let dtype = match f[0] {
            "f16" => "f16",
            "bf16" => "bf16",
            other => return Err(format!("bad dtype `{other}` in `{spec}`: f16 or bf16").into()),
        };
        let ragged = match f[5] {
            "uniform" => false,
            "ragged" => true,
            other => return Err(format!("bad lengths `{other}` in `{spec}`: uniform or ragged").into()),
        };
        let paged = match f.get(6) {
            None | Some(&"paged") => true,
            Some(&"contiguous") => false,
            Some(other) => return Err(format!("bad cache `{other}` in `{spec}`: paged or contiguous").into()),
        };
        let n: Vec<usize> = f[1..5].iter().map(|x| x.parse()).collect::<Result<_, _>>()?;
        Ok(Shape { dtype, b: n[0], h_q: n[1], s_q: n[2], ctx: n[3], ragged, paged })
    }
    fn label(&self) -> String {
        let lengths = if self.ragged { " ragged" } else { "" };
        let kv = if self.paged { "" } else { " contiguous" };
        format!("{} b{} h{} s_q{} ctx{}{lengths}{kv}", self.dtype, self.b, self.h_q, self.s_q, self.ctx)
    }
    /// The seqlens (deterministic) and the case on a GPU of `sms` SMs.
    fn case(&self, sms: usize) -> Case {
        let mut rng = common::Rng::new(self.ctx as u64 * 31 + self.b as u64);
        let seqlens = (0..self.b)
            .map(|_| {
                if self.ragged {
                    rng.uniform(self.ctx as f32 / 2.0, self.ctx as f32 * 1.5) as i32
                } else {
                    self.ctx as i32
                }
            })
            .collect();
        let num_parts = kernels::num_sm_parts(sms, self.s_q, self.h_q);
        Case { seqlens, s_q: self.s_q, h_q: self.h_q, paged: self.paged, num_parts }
    }
}

/// The acceptance shapes of issue 13 and the sweep of item 8.
fn shapes(set: &str) -> Res<Vec<Shape>> {
    let s = |dtype, b, h_q, s_q, ctx, ragged| Shape { dtype, b, h_q, s_q, ctx, ragged, paged: true };
    let mut out = vec![];
    if set == "acceptance" || set == "all" {
        for dtype in ["f16", "bf16"] {
            out.push(s(dtype, 128, 128, 1, 8192, false));
            out.push(s(dtype, 64, 128, 1, 8192, false));
            out.push(s(dtype, 128, 128, 2, 8192, false));
            out.push(s(dtype, 128, 16, 1, 8192, false));
        }
    }
    if set == "sweep" || set == "all" {
        for dtype in ["f16", "bf16"] {
            for b in [64, 128] {
                for ragged in [false, true] {
                    for ctx in [1024, 2048, 4096, 8192, 16384, 32768] {
                        for h_q in [16, 32, 64, 128] {
                            for s_q in [1, 2] {
                                let shape = s(dtype, b, h_q, s_q, ctx, ragged);
                                if !out.contains(&shape) {
                                    out.push(shape);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if !matches!(set, "acceptance" | "sweep" | "all") {
        // A list of specs: `f16:128:128:1:8192:uniform,bf16:..`.
        return set.split(',').map(Shape::parse).collect::<Res<Vec<_>>>().map_err(|e| {
            format!("unknown shape set `{set}` ({e}): acceptance, sweep, all, or specs separated by commas").into()
        });
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
        plot(&read_csv(Path::new(csv))?, Path::new(svg))?;
        println!("wrote {svg}");
        return Ok(());
    }
    let device = Device::auto()?;
    let stream = device.stream()?;
    println!("mla_decode on {}", device.name());
    let sms = device.multiprocessor_count().unwrap_or(4) as usize;
    if let Some(i) = args.iter().position(|a| a == "--dump") {
        let dir = args.get(i + 1).ok_or("--dump needs a directory")?;
        let specs: Vec<Shape> = args[i + 2..].iter().map(|s| Shape::parse(s)).collect::<Res<_>>()?;
        for (n, s) in specs.iter().enumerate() {
            match s.dtype {
                "bf16" => dump_case::<bf16>(&stream, s, sms, &Path::new(dir).join(n.to_string()))?,
                _ => dump_case::<f16>(&stream, s, sms, &Path::new(dir).join(n.to_string()))?,
            }
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

fn tol<T: Element>() -> f64 {
    if T::DTYPE == tile::ir::DType::BF16 {
        1e-2
    } else {
        2e-3
    }
}

/// Every combination against the CPU reference (all rows).
fn check_all(device: &Device, stream: &Stream) -> Res<()> {
    let seqlens = if device.is_interpreter() { vec![1, 63, 64, 65, 0] } else { vec![1, 63, 64, 65, 0, 1000, 8191] };
    let heads: &[usize] = if device.is_interpreter() { &[16, 20] } else { &[16, 20, 64, 128] };
    let parts = if device.is_interpreter() { 3 } else { 16 };
    let mut n = 0;
    for paged in [true, false] {
        for s_q in [1, 2] {
            for &h_q in heads {
                let c = Case { seqlens: seqlens.clone(), s_q, h_q, paged, num_parts: parts };
                let e16 = check_one::<f16>(stream, &c)?;
                let eb16 = check_one::<bf16>(stream, &c)?;
                println!("paged {paged} s_q {s_q} h_q {h_q}: f16 error {e16:.1e}, bf16 {eb16:.1e}");
                n += 2;
            }
        }
    }
    println!("{n} cases correct");
    Ok(())
}

fn check_one<T: MlaElement>(stream: &Stream, c: &Case) -> Res<f64> {
    let mut x = Inputs::<T>::new(stream, c, 1)?;
    x.check_metadata(stream, c)?;
    x.run(stream, c, Tiles::Auto)?;
    Ok(x.check(stream, c, None, tol::<T>())?.0)
}

/// The split kernel's tiles of the benchmark: `Tiles::Auto`, or
/// `Tiles::HopperPairs` with `MLA_TILES=pairs`, `Tiles::Seesaw` with
/// `MLA_TILES=seesaw`.
fn bench_tiles() -> Tiles {
    if std::env::var("MLA_TILES").as_deref() == Ok("pairs") {
        Tiles::HopperPairs
    } else if std::env::var("MLA_TILES").as_deref() == Ok("seesaw") {
        Tiles::Seesaw
    } else {
        Tiles::Auto
    }
}

/// What one shape measured.
struct Measured {
    ms: f64,
    metadata_us: f64,
    schedule: String,
}

/// Times one shape: correctness on three sampled rows first, then
/// `tile::bench` of split + combine (median after 2 warm-ups, enough reps
/// for about 0.2 s) and of the scheduler apart.
fn bench_ours<T: MlaElement>(device: &Device, stream: &Stream, s: &Shape, sms: usize) -> Res<Measured> {
    let c = s.case(sms);
    let mut x = Inputs::<T>::hashed(stream, &c, 7)?;
    if std::env::var("MLA_CHUNK_ORDER").as_deref() == Ok("batch") {
        x.metadata = kernels::Metadata::compute_in(stream, &x.seqlens, c.num_parts, kernels::ChunkOrder::Batch)?;
    }
    x.run(stream, &c, bench_tiles())?;
    let rows = [(0, 0, 0), (c.b() / 2, c.s_q - 1, c.h_q / 3), (c.b() - 1, c.s_q - 1, c.h_q - 1)];
    x.check(stream, &c, Some(&rows), tol::<T>())?;
    let tiles = bench_tiles();
    let hopper = kernels::hopper_tiles(stream, tiles);
    let cluster = kernels::split_cluster(stream, tiles, c.s_q, c.h_q);
    let meta = match (c.paged, kernels::split_seesaw(stream, tiles, c.paged, c.s_q, c.h_q)) {
        (true, true) => T::seesaw().1,
        (true, false) => T::paged(hopper, cluster).1,
        (false, _) => T::contiguous(hopper, cluster).1,
    };
    let first = bench(stream, 0, 1, || x.run(stream, &c, tiles))?.median_ms;
    let reps = ((200.0 / first.max(1e-3)) as usize).clamp(3, 50);
    let before = device.launch_counts(meta);
    let t = bench(stream, 2, reps, || x.run(stream, &c, tiles))?;
    let after = device.launch_counts(meta);
    let schedule = meta
        .targets
        .iter()
        .zip(after.iter().zip(before.iter().chain(std::iter::repeat(&0))))
        .filter(|(_, (a, b))| *a > *b)
        .map(|(t, _)| t.schedule)
        .collect::<Vec<_>>()
        .join("+");
    let m = bench(stream, 2, 20, || x.metadata.update(stream, &x.seqlens))?;
    Ok(Measured { ms: t.median_ms, metadata_us: m.median_ms * 1e3, schedule })
}

/// The copy bandwidth of `mla_copy` on 2 GiB (read + written bytes over time).
fn copy_bandwidth(stream: &Stream) -> Res<f64> {
    let n = 1usize << 30;
    let a = DeviceTensor::<f16>::zeros(stream, &[n])?;
    let mut b = DeviceTensor::<f16>::zeros(stream, &[n])?;
    let t = bench(stream, 3, 20, || mla_copy::launch(stream, &a, &mut b))?;
    Ok(2.0 * 2.0 * n as f64 / (t.median_ms * 1e-3) / 1e9)
}

/// A peer's time (ms) per (impl, spec), and its Σseqlen where it drew its own
/// lengths (ragged shapes: its FLOPs and bytes are its own, not ours).
type Peers = BTreeMap<(String, String), (f64, Option<f64>)>;

/// `impl,spec,ms[,sum_seqlen]` lines of the peers script.
fn read_peers(path: &Path) -> Res<Peers> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() >= 3 {
            if let Ok(ms) = f[2].trim().parse::<f64>() {
                let keys = f.get(3).and_then(|k| k.trim().parse::<f64>().ok());
                out.insert((f[0].to_string(), f[1].to_string()), (ms, keys));
            }
        }
    }
    Ok(out)
}

/// The rows of a CSV written by `--csv`: (shape, impl, ms, TFLOPS).
fn read_csv(path: &Path) -> Res<Vec<(Shape, String, f64, f64)>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = vec![];
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 10 {
            return Err(format!("{}: bad line `{line}`", path.display()).into());
        }
        out.push((Shape::parse(f[1])?, f[0].to_string(), f[2].parse()?, f[4].parse()?));
    }
    Ok(out)
}

fn bench_all(
    device: &Device,
    stream: &Stream,
    shapes: &[Shape],
    peers: &Peers,
    csv: Option<String>,
    plot_path: Option<String>,
) -> Res<()> {
    let sms = device.multiprocessor_count().unwrap_or(132) as usize;
    let copy = copy_bandwidth(stream)?;
    println!("device copy bandwidth (mla_copy, 2 GiB): {copy:.0} GB/s; {sms} SMs");
    println!("RESULT mla_copy gbps={copy:.0}");
    for ((imp, spec), (ms, _)) in peers.iter().filter(|((_, spec), _)| spec.starts_with("copy:")) {
        let bytes: f64 = spec[5..].parse().unwrap_or(0.0);
        println!("peer {imp} copy bandwidth: {:.0} GB/s", bytes / (ms * 1e-3) / 1e9);
    }
    let peer_names: Vec<String> = {
        let mut v: Vec<String> =
            peers.keys().filter(|(_, s)| !s.starts_with("copy:")).map(|(i, _)| i.clone()).collect();
        v.dedup();
        v
    };
    let mut rows: Vec<(Shape, String, f64, f64)> = vec![];
    let mut lines = String::from("impl,spec,ms,metadata_us,tflops,gbps,copy_fraction,dtype,b,h_q\n");
    let mut failed: Vec<String> = vec![];
    let mut table =
        format!("{:<36} {:>8} {:>8} {:>7} {:>7} {:>6}", "shape", "ms", "meta us", "TFLOPS", "GB/s", "%copy");
    for p in &peer_names {
        write!(table, " {:>12} {:>6}", format!("{p} TFLOPS"), "ratio")?;
    }
    println!("{table}");
    for s in shapes {
        let result = match s.dtype {
            "bf16" => bench_ours::<bf16>(device, stream, s, sms),
            _ => bench_ours::<f16>(device, stream, s, sms),
        };
        let m = match result {
            Ok(m) => m,
            Err(e) => {
                println!("{:<36} FAILED: {e}", s.label());
                println!("RESULT mla shape={} impl=ours status=failed", s.spec());
                failed.push(s.label());
                continue;
            }
        };
        let c = s.case(sms);
        let (tf, gbps) = (c.flops() / (m.ms * 1e-3) / 1e12, c.bytes() / (m.ms * 1e-3) / 1e9);
        rows.push((*s, "ours".into(), m.ms, tf));
        writeln!(
            lines,
            "ours,{},{:.4},{:.1},{tf:.1},{gbps:.0},{:.3},{},{},{}",
            s.spec(),
            m.ms,
            m.metadata_us,
            gbps / copy,
            s.dtype,
            s.b,
            s.h_q
        )?;
        let mut line = format!(
            "{:<36} {:>8.3} {:>8.1} {tf:>7.1} {gbps:>7.0} {:>6.1}",
            s.label(),
            m.ms,
            m.metadata_us,
            100.0 * gbps / copy
        );
        let mut result = format!(
            "RESULT mla shape={} ours_tflops={tf:.1} ours_gbps={gbps:.0} copy_fraction={:.3} metadata_us={:.1} schedule={}",
            s.spec(),
            gbps / copy,
            m.metadata_us,
            m.schedule
        );
        for p in &peer_names {
            match peers.get(&(p.clone(), s.spec())) {
                Some(&(pms, keys)) => {
                    let keys = keys.unwrap_or_else(|| c.keys());
                    let pt = c.flops_for(keys) / (pms * 1e-3) / 1e12;
                    write!(line, " {pt:>12.1} {:>6.3}", tf / pt)?;
                    write!(result, " {p}_tflops={pt:.1} ratio_{p}={:.3}", tf / pt)?;
                    rows.push((*s, p.clone(), pms, pt));
                    let pg = c.bytes_for(keys) / (pms * 1e-3) / 1e9;
                    writeln!(
                        lines,
                        "{p},{},{pms:.4},,{pt:.1},{pg:.0},{:.3},{},{},{}",
                        s.spec(),
                        pg / copy,
                        s.dtype,
                        s.b,
                        s.h_q
                    )?;
                }
                None => write!(line, " {:>12} {:>6}", "-", "-")?,
            }
        }
        println!("{line}  [{}]", m.schedule);
        println!("{result}");
    }
    if let Some(path) = csv {
        std::fs::write(&path, lines)?;
        println!("wrote {path}");
    }
    if let Some(path) = plot_path {
        plot(&rows, Path::new(&path))?;
        println!("wrote {path}");
    }
    if !failed.is_empty() {
        return Err(format!("{} shapes failed (wrong or not launched): {}", failed.len(), failed.join("; ")).into());
    }
    Ok(())
}

/// TFLOPS against context of the h_q 128, s_q 1, uniform, paged shapes,
/// one line per implementation, batch and dtype.
fn plot(rows: &[(Shape, String, f64, f64)], path: &Path) -> Res<()> {
    use plotters::prelude::*;
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (s, imp, _, tf) in rows {
        if s.h_q == 128 && s.s_q == 1 && !s.ragged && s.paged {
            let name = format!("{imp} b{} {}", s.b, s.dtype);
            lines.entry(name).or_default().push(((s.ctx as f64).log2(), *tf));
        }
    }
    let top = lines.values().flatten().map(|p| p.1).fold(0.0, f64::max) * 1.1 + 1.0;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("MLA decode (paged), h_q 128, s_q 1", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(9.8f64..15.2f64, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("context length")
        .y_desc("TFLOPS")
        .x_labels(6)
        .x_label_formatter(&|x| format!("{}", 2f64.powf(x.round()) as u64))
        .draw()?;
    for (n, (name, mut pts)) in lines.into_iter().enumerate() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let c = Palette99::pick(n).to_rgba();
        let color = RGBColor(c.0, c.1, c.2);
        let width = if name.starts_with("ours") { 3 } else { 2 };
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(width)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

/// Runs one shape (hashed cache) and writes what `scripts/mla_check.py`
/// reads: `q.bin` `[b, s_q, h_q, 576]`, `kv.bin` (the keys of each batch in
/// order, `[b, ctx_max, 576]`, zero past each seqlen), both the element
/// type's raw little-endian bits; `seqlens.bin` (i32), `out.bin` and
/// `lse.bin` (f32); `meta.txt` (the spec, then `b s_q h_q ctx_max scale`).
fn dump_case<T: MlaElement>(stream: &Stream, s: &Shape, sms: usize, dir: &Path) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    let c = s.case(sms);
    let mut x = Inputs::<T>::hashed(stream, &c, 11)?;
    x.run(stream, &c, Tiles::Auto)?;
    let bits = |v: &mut dyn Iterator<Item = f64>| -> Vec<u8> {
        v.flat_map(|e| {
            if T::DTYPE == tile::ir::DType::BF16 {
                bf16::from_f64(e).to_bits().to_le_bytes()
            } else {
                f16::from_f64(e).to_bits().to_le_bytes()
            }
        })
        .collect()
    };
    std::fs::write(dir.join("q.bin"), bits(&mut x.q.iter().map(|v| v.to_f64())))?;
    let ctx_max = c.seqlens.iter().copied().max().unwrap_or(0).max(0) as usize;
    let mut kv = Vec::with_capacity(c.b() * ctx_max * kernels::D * 2);
    for (b, &len) in c.seqlens.iter().enumerate() {
        for j in 0..ctx_max {
            let row = if j < len as usize { x.key(b, j) } else { vec![0.0; kernels::D] };
            kv.extend(bits(&mut row.into_iter()));
        }
    }
    std::fs::write(dir.join("kv.bin"), kv)?;
    let le32 = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|e| e.to_le_bytes()).collect() };
    std::fs::write(dir.join("seqlens.bin"), c.seqlens.iter().flat_map(|e| e.to_le_bytes()).collect::<Vec<u8>>())?;
    std::fs::write(dir.join("out.bin"), le32(&x.out.to_vec(stream)?))?;
    std::fs::write(dir.join("lse.bin"), le32(&x.lse.to_vec(stream)?))?;
    std::fs::write(
        dir.join("meta.txt"),
        format!("{}\n{} {} {} {ctx_max} {}\n", s.spec(), c.b(), c.s_q, c.h_q, c.scale()),
    )?;
    println!("dumped {} into {}", s.label(), dir.display());
    Ok(())
}

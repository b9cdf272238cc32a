//! The autotuner: picks, per (device, kernel, shape bucket), the fastest of
//! a tuned kernel's candidate configurations, and keeps the choice in
//! memory and on disk.
//!
//! A kernel declares its tuned parameters with `tune(..)` in its attribute
//! (the language reference, `tile::tile_kernel`); its generated
//! `launch_tuned::<..>` passes a [`TunedKernel`] (the instances that match
//! the caller's other parameters, in `instances(..)` order) to
//! [`Tuner::launch`]. On the first launch for a new key (device, kernel,
//! candidates' hash and the arguments' shape bucket, [`bucket`]) the tuner:
//! 1. looks for the choice in the shipped file (`TILE_TUNE_CACHE`), then in
//!    the user's cache file ([`store::cache_dir`]`/tune.json`); an entry
//!    counts only if its device, kernel name, candidate hash and bucket are
//!    this launch's and it names a candidate that still exists;
//! 2. otherwise (unless `TILE_TUNE=cache-only`) times every candidate on
//!    the real arguments: `warmup` launches (the first also tells whether
//!    it launches at all: a candidate whose launch fails, e.g. no variant
//!    for this GPU or a limit, is skipped with its reason), then `reps`
//!    launches between two events; the fastest mean wins. The `&mut`
//!    tensors the kernel reads (`tile_ir::abi::reads_tensor`: an
//!    accumulating output, an `atomic_add` target) are saved before the
//!    first timed launch and restored after the last, so the real launch
//!    sees the caller's data; write-only outputs are left as the candidates
//!    wrote them (the real launch writes them again);
//! 3. writes the choice to the user's cache file and launches it.
//!
//! Later launches with the same key use the choice in memory. Every key is
//! tuned once per [`Tuner`] even with many threads launching (a
//! `cache::OnceMap`); a failed tuning stores nothing.
//!
//! Configurations that are more than one kernel's instance (a split-K
//! product and its reduction, a padding copy and a GEMM) are tuned the same
//! way through [`Tuner::pick`]: the caller lists them ([`HostCandidates`],
//! with every kernel they may launch for the hash) and runs configuration
//! `i` in a closure; the tuner times, keeps and caches the choice.
//!
//! Modes (`TILE_TUNE`, [`Mode`]): `on` (the default), `quiet` (no progress
//! bar), `off` (the first candidate that launches, no timing, no cache),
//! `cache-only` (cached choices, else the first candidate: never tunes).
//! `TILE_TUNE_TRACE=1` prints a line before each candidate is timed.
//!
//! Layer: after `launch/` (it launches through [`crate::launch::launch`]);
//! nothing below imports it.

mod key;
mod saved;
mod store;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cache::{lock, OnceMap};
use crate::device::Stream;
use crate::error::{Error, Result};
use crate::launch::{launch, parsed_kernel, KernelArg, KernelMeta};

pub use key::{bucket, bucket_dim, DeviceId, EXACT_UP_TO};
use key::{kernel_hash, Key};
pub use store::{cache_dir, cache_file, CacheFile, FORMAT};

/// The environment variable that sets the [`Mode`].
pub const TUNE_ENV: &str = "TILE_TUNE";
/// The environment variable naming a shipped cache file to read choices
/// from (before the user's cache; never written).
pub const TUNE_CACHE_ENV: &str = "TILE_TUNE_CACHE";
/// The environment variable that, set (not `0`), makes the tuner print a
/// line to stderr before timing each candidate (which kernel, bucket and
/// configuration): the last line names a candidate that hangs.
pub const TUNE_TRACE_ENV: &str = "TILE_TUNE_TRACE";
/// The environment variable naming the cache directory (before
/// `$XDG_CACHE_HOME/tile` and `~/.cache/tile`).
pub const CACHE_DIR_ENV: &str = "TILE_CACHE_DIR";

/// Rounds of timing on a GPU: every candidate is timed once per round, in
/// turn, and keeps its least time. With one round, two runs of the GEMM
/// sweep on the H200 (session 15) chose configurations 12 % apart for the
/// same shape (abt bf16 16 × 28672 × 8192: `16x128/2sm split 1` at 0.98
/// of cuBLAS in one, `split 8` at 0.87 in the next).
pub const GPU_ROUNDS: u32 = 3;

/// One candidate configuration of a tuned kernel.
#[derive(Debug)]
pub struct Candidate {
    /// Its tuned parameters as written: `BM = 128, BN = 256, STAGES = 3`.
    pub config: &'static str,
    /// The instance's compiled kernel.
    pub meta: &'static KernelMeta,
}

/// A tuned kernel as the caller sees it: the instances that match the
/// parameters the caller chose, which the tuner picks among.
#[derive(Debug)]
pub struct TunedKernel {
    /// `matmul::<f16, f16>`: the kernel and the caller's parameters.
    pub name: &'static str,
    /// The candidates, in `instances(..)` order (the first is the default).
    pub candidates: &'static [Candidate],
}

/// What the tuner does at a launch (`TILE_TUNE`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Tune on the first launch of a new key, with a progress bar when
    /// stderr is a terminal (`on`, the default).
    On,
    /// As [`Mode::On`], without the progress bar (`quiet`).
    Quiet,
    /// The first candidate that launches; no timing, no cache (`off`).
    Off,
    /// Cached choices (shipped file, then the user's cache), else the first
    /// candidate; never tunes (`cache-only`: a deployed service's hot path).
    CacheOnly,
}

impl Mode {
    /// The mode a `TILE_TUNE` value names (`on`, `1` and empty are
    /// [`Mode::On`]).
    pub fn parse(value: &str) -> Result<Mode> {
        Ok(match value.trim().to_ascii_lowercase().as_str() {
            "" | "on" | "1" => Mode::On,
            "quiet" => Mode::Quiet,
            "off" | "0" => Mode::Off,
            "cache-only" => Mode::CacheOnly,
            other => {
                return Err(Error::Usage(format!(
                    "{TUNE_ENV}=`{other}` is not a tuning mode; use `on` (the default), `quiet`, `off` or `cache-only`"
                )))
            }
        })
    }
}

/// How a [`Tuner`] works.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The mode.
    pub mode: Mode,
    /// Untimed launches per candidate (at least 1: the first tells whether
    /// the candidate launches); `None`: 2 on a GPU, 1 on the interpreter.
    pub warmup: Option<u32>,
    /// Timed launches per candidate and round; `None`: 10 on a GPU, 1 on
    /// the interpreter. On a GPU the candidates are timed in turn,
    /// [`GPU_ROUNDS`] times over, each keeping its fastest round (so
    /// that a clock still ramping up for the first candidate, or one
    /// noisy moment, does not decide); once on the interpreter.
    pub reps: Option<u32>,
    /// Where the cache file is read and written; `None`: memory only.
    pub cache_dir: Option<PathBuf>,
    /// A shipped cache file, read before the cache directory's.
    pub shipped: Option<PathBuf>,
}

impl Settings {
    /// `TILE_TUNE`, `TILE_TUNE_CACHE` and the cache directory
    /// ([`cache_dir`]); default warmup and reps.
    pub fn from_env() -> Result<Settings> {
        let mode = match std::env::var(TUNE_ENV) {
            Ok(v) => Mode::parse(&v)?,
            Err(_) => Mode::On,
        };
        let shipped = std::env::var_os(TUNE_CACHE_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
        Ok(Settings { mode, warmup: None, reps: None, cache_dir: cache_dir(), shipped })
    }
}

/// Where a choice came from.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// Timed by this tuner.
    #[default]
    Tuned,
    /// Read from the shipped file (`TILE_TUNE_CACHE`).
    Shipped,
    /// Read from the user's cache file.
    Cache,
    /// The first candidate (`TILE_TUNE=cache-only` and no cached choice).
    Default,
}

/// One candidate's measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateTime {
    /// [`Candidate::config`].
    pub config: String,
    /// Mean milliseconds per launch over its fastest round; `None` when it
    /// was skipped.
    pub ms: Option<f64>,
    /// Why it was skipped (its launch error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// One choice: its key, the winner, and every candidate's time. The cache
/// file holds a list of these.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The device it was tuned on.
    pub device: DeviceId,
    /// [`TunedKernel::name`].
    pub kernel: String,
    /// The hash of the candidates (configurations, IR, PTX).
    pub hash: String,
    /// The shape bucket ([`bucket`]).
    pub bucket: String,
    /// The winner's [`Candidate::config`].
    pub config: String,
    /// The winner's index among the candidates.
    pub index: usize,
    /// Every candidate's time (empty for [`Source::Default`]).
    pub candidates: Vec<CandidateTime>,
    /// Milliseconds the tuning took in all.
    pub tuning_ms: f64,
    /// Where this process got it (not stored in files).
    #[serde(skip)]
    pub source: Source,
}

impl Record {
    fn key(&self) -> Key {
        Key {
            device: self.device.clone(),
            kernel: self.kernel.clone(),
            hash: self.hash.clone(),
            bucket: self.bucket.clone(),
        }
    }

    fn matches(&self, key: &Key) -> bool {
        self.device == key.device && self.kernel == key.kernel && self.hash == key.hash && self.bucket == key.bucket
    }
}

/// Tunes kernels and remembers the choices (see the module doc). One
/// global tuner serves the generated `launch_tuned` ([`Tuner::global`]);
/// a program that tunes ahead of time makes its own, launches through it
/// (`launch_tuned_with`) on the shapes it will serve, and writes the
/// choices with [`Tuner::save`] to ship as `TILE_TUNE_CACHE`.
pub struct Tuner {
    settings: Settings,
    choices: OnceMap<Key, Record>,
    records: Mutex<Vec<Record>>,
    shipped: OnceLock<CacheFile>,
}

impl Tuner {
    /// A tuner with `settings` and nothing in memory.
    pub fn new(settings: Settings) -> Tuner {
        Tuner { settings, choices: OnceMap::default(), records: Mutex::new(Vec::new()), shipped: OnceLock::new() }
    }

    /// The process's tuner, from the environment ([`Settings::from_env`])
    /// at its first use.
    pub fn global() -> Result<&'static Tuner> {
        static GLOBAL: OnceLock<std::result::Result<Tuner, String>> = OnceLock::new();
        match GLOBAL.get_or_init(|| Settings::from_env().map(Tuner::new).map_err(|e| e.to_string())) {
            Ok(t) => Ok(t),
            Err(e) => Err(Error::Usage(e.clone())),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Every choice this tuner made or read, in the order it did.
    pub fn records(&self) -> Vec<Record> {
        lock(&self.records).clone()
    }

    /// The choice for `tuned` at these arguments if this tuner has one
    /// (tuning nothing).
    pub fn choice(&self, stream: &Stream, tuned: &'static TunedKernel, args: &[KernelArg<'_>]) -> Option<Record> {
        self.choices.get(&self.key(stream, tuned, args)).map(|r| (*r).clone())
    }

    /// Writes every choice of [`Tuner::records`] (but the defaults) to
    /// `path`, added to what the file holds: a file to ship and name with
    /// `TILE_TUNE_CACHE`.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut file = CacheFile::load(path);
        for r in self.records() {
            if r.source != Source::Default {
                file.insert(r);
            }
        }
        file.write(path)
    }

    fn key(&self, stream: &Stream, tuned: &'static TunedKernel, args: &[KernelArg<'_>]) -> Key {
        Key {
            device: DeviceId::of(stream.device()),
            kernel: tuned.name.to_string(),
            hash: kernel_hash(tuned),
            bucket: bucket(args),
        }
    }

    /// Launches the best candidate of `tuned` for these arguments, tuning
    /// first if this key has no choice yet (see the module doc).
    pub fn launch(&self, stream: &Stream, tuned: &'static TunedKernel, args: &mut [KernelArg<'_>]) -> Result<()> {
        if tuned.candidates.is_empty() {
            return Err(Error::Usage(format!("the tuned kernel `{}` has no candidates", tuned.name)));
        }
        let empty = args.iter().any(|a| a.raw().is_some_and(|r| r.len() == 0));
        if self.settings.mode == Mode::Off || empty {
            return launch_first(stream, tuned, args, None);
        }
        let key = self.key(stream, tuned, args);
        let choice = self.choices.get_or_try_init(&key, || self.choose(stream, tuned, &key, args))?;
        launch_first(stream, tuned, args, Some(choice.index))
    }

    /// The choice for `key`: cached, the default, or tuned.
    fn choose(
        &self,
        stream: &Stream,
        tuned: &'static TunedKernel,
        key: &Key,
        args: &mut [KernelArg<'_>],
    ) -> Result<Record> {
        let configs: Vec<&str> = tuned.candidates.iter().map(|c| c.config).collect();
        self.choose_among(key, &configs, || self.tune(stream, tuned, key, args))
    }

    /// The choice for `key` among `configs`: the shipped file's, the
    /// cache's, the default (`cache-only`), or `tune()`'s (then written to
    /// the cache). Recorded in [`Tuner::records`].
    fn choose_among(&self, key: &Key, configs: &[&str], tune: impl FnOnce() -> Result<Record>) -> Result<Record> {
        let valid = |r: &Record| configs.get(r.index).is_some_and(|c| *c == r.config);
        let shipped =
            self.shipped.get_or_init(|| self.settings.shipped.as_deref().map(CacheFile::load).unwrap_or_default());
        let cache_path = self.settings.cache_dir.as_deref().map(cache_file);
        let found = shipped.find(key).filter(|r| valid(r)).map(|r| (r.clone(), Source::Shipped)).or_else(|| {
            let file = CacheFile::load(cache_path.as_deref()?);
            file.find(key).filter(|r| valid(r)).map(|r| (r.clone(), Source::Cache))
        });
        let record = match found {
            Some((mut r, source)) => {
                r.source = source;
                r
            }
            None if self.settings.mode == Mode::CacheOnly => default_record(configs[0], key),
            None => {
                let record = tune()?;
                if let Some(path) = cache_path.as_ref().filter(|_| record.source == Source::Tuned) {
                    if let Err(e) = CacheFile::save_record(path, &record) {
                        eprintln!("tile: cannot write the tuning cache `{}`: {e}", path.display());
                    }
                }
                record
            }
        };
        lock(&self.records).push(record.clone());
        Ok(record)
    }

    /// Times every candidate on `args` (saving and restoring the outputs it
    /// reads) and returns the fastest.
    fn tune(
        &self,
        stream: &Stream,
        tuned: &'static TunedKernel,
        key: &Key,
        args: &mut [KernelArg<'_>],
    ) -> Result<Record> {
        let started = Instant::now();
        let (warmup, reps, rounds) = self.iterations(stream);
        let reads = reads_of(tuned);
        let saved = match saved::Saved::take(stream, args, &reads) {
            Ok(saved) => saved,
            // No memory for the copies: the first candidate, untimed, this
            // time (nothing written to the cache).
            Err(e) => {
                eprintln!("tile: not tuning `{}` at {}: cannot save its outputs ({e})", tuned.name, key.bucket);
                return Ok(default_record(tuned.candidates[0].config, key));
            }
        };
        let configs: Vec<&str> = tuned.candidates.iter().map(|c| c.config).collect();
        let times = self
            .time_all(key, &configs, rounds, |i| time_candidate(stream, tuned.candidates[i].meta, args, warmup, reps));
        saved.restore(stream, args)?;
        fastest(key, &configs, times, started)
    }

    /// Untimed and timed launches per candidate and round, and the rounds:
    /// the settings', else 2 and 10 on a GPU, 1 and 1 on the interpreter;
    /// [`GPU_ROUNDS`] rounds on a GPU, one on the interpreter.
    fn iterations(&self, stream: &Stream) -> (u32, u32, u32) {
        let interp = stream.device().is_interpreter();
        let warmup = self.settings.warmup.unwrap_or(if interp { 1 } else { 2 }).max(1);
        let reps = self.settings.reps.unwrap_or(if interp { 1 } else { 10 }).max(1);
        (warmup, reps, if interp { 1 } else { GPU_ROUNDS })
    }

    /// `time(i)` for every candidate, in order, `rounds` times over (each
    /// keeping its least time), under the progress bar (mode `on` and
    /// stderr a terminal); an error is that candidate's skip reason (it is
    /// not run again).
    fn time_all(
        &self,
        key: &Key,
        configs: &[&str],
        rounds: u32,
        mut time: impl FnMut(usize) -> Result<f64>,
    ) -> Vec<CandidateTime> {
        let bar = (self.settings.mode == Mode::On && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(configs.len() as u64 * u64::from(rounds.max(1))),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(style) =
                indicatif::ProgressStyle::with_template("tuning {msg} [{bar:30}] {pos}/{len} ({elapsed})")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(format!("{} at {}", key.kernel, key.bucket));
            bar
        });
        // `TILE_TUNE_TRACE=1`: a line before each candidate runs, so that a
        // candidate that hangs or crashes is named by the last line.
        let trace = std::env::var(TUNE_TRACE_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
        let mut times: Vec<CandidateTime> =
            configs.iter().map(|c| CandidateTime { config: c.to_string(), ms: None, skipped: None }).collect();
        for round in 0..rounds.max(1) {
            for (i, t) in times.iter_mut().enumerate() {
                if t.skipped.is_some() {
                    continue;
                }
                if trace {
                    eprintln!(
                        "tile: tuning {} at {}: candidate {}/{} `{}` (round {})",
                        key.kernel,
                        key.bucket,
                        i + 1,
                        configs.len(),
                        t.config,
                        round + 1
                    );
                }
                match time(i) {
                    Ok(ms) => t.ms = Some(t.ms.map_or(ms, |best| best.min(ms))),
                    Err(e) => {
                        t.ms = None;
                        t.skipped = Some(e.to_string());
                    }
                }
                if let Some(bar) = &bar {
                    bar.inc(1);
                }
            }
        }
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        times
    }

    /// The best of configurations that the caller runs itself, for
    /// `candidates.bucket`: the cached choice, or (the first time, unless
    /// `TILE_TUNE` says otherwise) each configuration timed through
    /// `run(i)`, which runs configuration `i` once with its work on `stream`.
    /// The choice is kept and cached as a tuned kernel's
    /// ([`Tuner::launch`]); with `TILE_TUNE=off` it is the first
    /// configuration and `run` is never called.
    ///
    /// What `run` writes is the caller's: the tuner saves and restores
    /// nothing, so the configurations must only write what the caller's
    /// real run writes again (outputs, scratch), never read what another
    /// run wrote. A configuration whose run fails is skipped (its error in
    /// the record); an error when none runs.
    pub fn pick(
        &self,
        stream: &Stream,
        candidates: &HostCandidates<'_>,
        mut run: impl FnMut(usize) -> Result<()>,
    ) -> Result<Record> {
        let configs: Vec<&str> = candidates.configs.iter().map(String::as_str).collect();
        if configs.is_empty() {
            return Err(Error::Usage(format!("`{}` has no configurations to tune", candidates.name)));
        }
        let key = Key {
            device: DeviceId::of(stream.device()),
            kernel: candidates.name.to_string(),
            hash: host_hash(candidates),
            bucket: candidates.bucket.clone(),
        };
        if self.settings.mode == Mode::Off {
            return Ok(default_record(configs[0], &key));
        }
        let (warmup, reps, rounds) = self.iterations(stream);
        let choice = self.choices.get_or_try_init(&key, || {
            self.choose_among(&key, &configs, || {
                let started = Instant::now();
                let times = self.time_all(&key, &configs, rounds, |i| {
                    for _ in 0..warmup {
                        run(i)?;
                    }
                    stream.synchronize()?;
                    let start = stream.record_event()?;
                    for _ in 0..reps {
                        run(i)?;
                    }
                    let end = stream.record_event()?;
                    end.synchronize()?;
                    Ok(start.elapsed_ms(&end)? / reps as f64)
                });
                fastest(&key, &configs, times, started)
            })
        })?;
        Ok((*choice).clone())
    }
}

/// Configurations that a caller runs itself, for [`Tuner::pick`]: each one
/// more than one kernel's instance (a split-K product and its reduction, a
/// padding copy before a GEMM), which no kernel's `tune(..)` describes.
#[derive(Clone, Debug)]
pub struct HostCandidates<'a> {
    /// What is tuned, as the cache names it (`ShapedGemm<f16> abt`).
    pub name: &'a str,
    /// The configurations as text, the first the default.
    pub configs: &'a [String],
    /// Every kernel the configurations may launch: their names, IR and PTX
    /// are hashed into the key with the configurations, so that a rebuilt
    /// kernel never reuses an old choice.
    pub kernels: &'a [&'static KernelMeta],
    /// The shape bucket, the caller's (e.g. its dims through [`bucket_dim`]).
    pub bucket: String,
}

/// The hash of host candidates: name, configurations, and every kernel's
/// name, IR and variants.
fn host_hash(c: &HostCandidates<'_>) -> String {
    let mut h = key::Fnv::new();
    h.write(c.name.as_bytes());
    for config in c.configs {
        h.write(config.as_bytes());
    }
    for meta in c.kernels {
        key::write_meta(&mut h, meta);
    }
    h.hex()
}

/// The record of the fastest of `times` (an error naming every skip when
/// none ran).
fn fastest(key: &Key, configs: &[&str], times: Vec<CandidateTime>, started: Instant) -> Result<Record> {
    let best = times
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.ms.map(|ms| (i, ms)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i);
    let Some(index) = best else {
        let why: Vec<String> =
            times.iter().map(|t| format!("`{}`: {}", t.config, t.skipped.as_deref().unwrap_or("?"))).collect();
        return Err(Error::Launch {
            kernel: key.kernel.clone(),
            message: format!("no candidate configuration launches on these arguments ({})", why.join("; ")),
        });
    };
    Ok(Record {
        device: key.device.clone(),
        kernel: key.kernel.clone(),
        hash: key.hash.clone(),
        bucket: key.bucket.clone(),
        config: configs[index].to_string(),
        index,
        candidates: times,
        tuning_ms: started.elapsed().as_secs_f64() * 1e3,
        source: Source::Tuned,
    })
}

/// The first candidate, untimed ([`Source::Default`]).
fn default_record(config: &str, key: &Key) -> Record {
    Record {
        device: key.device.clone(),
        kernel: key.kernel.clone(),
        hash: key.hash.clone(),
        bucket: key.bucket.clone(),
        config: config.to_string(),
        index: 0,
        candidates: Vec::new(),
        tuning_ms: 0.0,
        source: Source::Default,
    }
}

/// For each parameter, whether any candidate reads it
/// (`tile_ir::abi::reads_tensor`). A candidate whose IR does not parse is
/// left out: its launch fails before it touches memory.
fn reads_of(tuned: &'static TunedKernel) -> Vec<bool> {
    let mut reads: Vec<bool> = Vec::new();
    for c in tuned.candidates {
        let Ok(k) = parsed_kernel(c.meta) else { continue };
        let r = tile_ir::abi::reads_tensor(&k);
        if reads.len() < r.len() {
            reads.resize(r.len(), false);
        }
        for (a, b) in reads.iter_mut().zip(r) {
            *a |= b;
        }
    }
    reads
}

/// `warmup` launches, then the mean milliseconds of `reps` launches between
/// two events.
fn time_candidate(
    stream: &Stream,
    meta: &'static KernelMeta,
    args: &mut [KernelArg<'_>],
    warmup: u32,
    reps: u32,
) -> Result<f64> {
    for _ in 0..warmup {
        launch(stream, meta, args)?;
    }
    stream.synchronize()?;
    let start = stream.record_event()?;
    for _ in 0..reps {
        launch(stream, meta, args)?;
    }
    let end = stream.record_event()?;
    end.synchronize()?;
    Ok(start.elapsed_ms(&end)? / reps as f64)
}

/// Launches candidate `first` (or the first), else the next ones in order
/// until one launches; the first error when none does.
fn launch_first(
    stream: &Stream,
    tuned: &'static TunedKernel,
    args: &mut [KernelArg<'_>],
    first: Option<usize>,
) -> Result<()> {
    let start = first.filter(|&i| i < tuned.candidates.len()).unwrap_or(0);
    let order = std::iter::once(start).chain((0..tuned.candidates.len()).filter(|&i| i != start));
    let mut error = None;
    for i in order {
        match launch(stream, tuned.candidates[i].meta, args) {
            Ok(()) => return Ok(()),
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    Err(error.unwrap_or_else(|| Error::Usage(format!("the tuned kernel `{}` has no candidates", tuned.name))))
}

/// What a generated `launch_tuned` calls: [`Tuner::global`]'s
/// [`Tuner::launch`].
pub fn launch_tuned(stream: &Stream, tuned: &'static TunedKernel, args: &mut [KernelArg<'_>]) -> Result<()> {
    Tuner::global()?.launch(stream, tuned, args)
}

#[cfg(test)]
mod tests;

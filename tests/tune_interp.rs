//! The autotuner through the real path on the interpreter device (tiny
//! shapes, one warmup and one timed launch per candidate): the choice is
//! made once, written to the cache file and reused by a second launch and
//! by a second tuner (another process), an accumulating kernel's output is
//! not corrupted by the timing launches, a candidate whose launch fails is
//! skipped with its reason, and the `TILE_TUNE` modes. Every tuner here has
//! its own temporary cache directory (never the user's).
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/tune.rs"]
mod kernels;

use common::Rng;
use kernels::{add, axpy};
use tile::prelude::*;
use tile::tune::{Mode, Settings, Source, Tuner};

/// A temporary cache directory, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("tile-tune-test-{tag}-{}-{nonce}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tuner(mode: Mode, dir: &TempDir) -> Tuner {
    Tuner::new(Settings { mode, warmup: Some(1), reps: Some(1), cache_dir: Some(dir.0.clone()), shipped: None })
}

fn axpy_reference(x: &[f32], y: &[f32], alpha: f32) -> Vec<f32> {
    x.iter().zip(y).map(|(&x, &y)| y + alpha * x).collect()
}

#[test]
fn accumulating_output_is_restored_and_the_choice_is_cached() {
    let dev = Device::interpreter();
    let s = dev.stream().unwrap();
    let dir = TempDir::new("acc");
    let t = tuner(Mode::Quiet, &dir);
    let mut rng = Rng::new(3);
    for n in [1usize, 77, 300] {
        let x = rng.vec(n, -1.0, 1.0);
        let y = rng.vec(n, -1.0, 1.0);
        let x_t = DeviceTensor::from_slice(&s, &x, &[n]).unwrap();
        let mut y_t = DeviceTensor::from_slice(&s, &y, &[n]).unwrap();
        axpy::launch_tuned_with(&t, &s, &x_t, &mut y_t, 0.5).unwrap();
        // Four candidates ran twice each on `y`: only the real launch counts.
        assert_eq!(y_t.to_vec(&s).unwrap(), axpy_reference(&x, &y, 0.5), "n = {n}");
        // The untuned launch of any candidate computes the same.
        let mut y_plain = DeviceTensor::from_slice(&s, &y, &[n]).unwrap();
        axpy::launch::<64, 32>(&s, &x_t, &mut y_plain, 0.5).unwrap();
        assert_eq!(y_plain.to_vec(&s).unwrap(), axpy_reference(&x, &y, 0.5));
        // A second launch reuses the choice: tuned once per bucket.
        axpy::launch_tuned_with(&t, &s, &x_t, &mut y_t, 0.5).unwrap();
        let twice = axpy_reference(&x, &axpy_reference(&x, &y, 0.5), 0.5);
        assert_eq!(y_t.to_vec(&s).unwrap(), twice, "n = {n}");
    }
    let records = t.records();
    let buckets: Vec<&str> = records.iter().map(|r| r.bucket.as_str()).collect();
    assert_eq!(buckets, ["1,1", "128,128", "512,512"]);
    for r in &records {
        assert_eq!(r.source, Source::Tuned);
        assert_eq!(r.kernel, "axpy");
        assert_eq!(r.candidates.len(), 4);
        assert!(r.candidates.iter().all(|c| c.ms.is_some() && c.skipped.is_none()), "{r:?}");
        let best = r.candidates.iter().map(|c| c.ms.unwrap()).fold(f64::INFINITY, f64::min);
        assert_eq!(r.candidates[r.index].ms, Some(best));
        assert_eq!(r.config, r.candidates[r.index].config);
    }
    // The cache file holds the three choices; another tuner (another
    // process) reads them instead of tuning.
    let file = tile::tune::CacheFile::load(&tile::tune::cache_file(&dir.0));
    assert_eq!(file.format, tile::tune::FORMAT);
    assert_eq!(file.entries.len(), 3);
    let again = tuner(Mode::CacheOnly, &dir);
    let x = rng.vec(300, -1.0, 1.0);
    let y = rng.vec(300, -1.0, 1.0);
    let x_t = DeviceTensor::from_slice(&s, &x, &[300]).unwrap();
    let mut y_t = DeviceTensor::from_slice(&s, &y, &[300]).unwrap();
    axpy::launch_tuned_with(&again, &s, &x_t, &mut y_t, 2.0).unwrap();
    assert_eq!(y_t.to_vec(&s).unwrap(), axpy_reference(&x, &y, 2.0));
    let read = again.records();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].source, Source::Cache);
    assert_eq!(read[0].config, records[2].config);
    assert_eq!(
        again
            .choice(
                &s,
                axpy::tuned(),
                &[
                    tile::__private::KernelArg::tensor(&x_t),
                    tile::__private::KernelArg::tensor_mut(&mut y_t),
                    tile::__private::KernelArg::F32(2.0)
                ]
            )
            .map(|r| r.index),
        Some(records[2].index)
    );
}

#[test]
fn caller_picks_the_untuned_parameters() {
    let dev = Device::interpreter();
    let s = dev.stream().unwrap();
    let dir = TempDir::new("add");
    let t = tuner(Mode::Quiet, &dir);
    // `add::<f32>` tunes between BLOCK = 32 and 64; `add::<f16>` has one.
    assert_eq!(add::tuned::<f32>().candidates.len(), 2);
    assert_eq!(add::tuned::<f16>().candidates.len(), 1);
    assert_eq!(add::tuned::<f32>().name, "add::<f32>");
    assert_eq!(add::tuned::<f32>().candidates[1].config, "BLOCK = 64");
    let mut rng = Rng::new(5);
    let n = 100;
    let a = rng.vec(n, -1.0, 1.0);
    let b = rng.vec(n, -1.0, 1.0);
    let a_t = DeviceTensor::from_slice(&s, &a, &[n]).unwrap();
    let b_t = DeviceTensor::from_slice(&s, &b, &[n]).unwrap();
    let mut c_t = DeviceTensor::<f32>::zeros(&s, &[n]).unwrap();
    add::launch_tuned_with::<f32>(&t, &s, &a_t, &b_t, &mut c_t).unwrap();
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(c_t.to_vec(&s).unwrap(), want);
    let a16: Vec<f16> = a.iter().map(|&v| f16::from_f32(v)).collect();
    let a16_t = DeviceTensor::from_slice(&s, &a16, &[n]).unwrap();
    let mut c16_t = DeviceTensor::<f16>::zeros(&s, &[n]).unwrap();
    add::launch_tuned_with::<f16>(&t, &s, &a16_t, &a16_t, &mut c16_t).unwrap();
    let want16: Vec<f16> = a16.iter().map(|&v| f16::from_f32(v.to_f32() * 2.0)).collect();
    assert_eq!(c16_t.to_vec(&s).unwrap(), want16);
    let kernels: Vec<String> = t.records().iter().map(|r| r.kernel.clone()).collect();
    assert_eq!(kernels, ["add::<f32>", "add::<f16>"]);
}

/// A candidate whose embedded IR the runtime cannot read: its launch fails
/// (as a GPU launch fails for a limit or a tensor map), so the tuner must
/// skip it and say why.
static BROKEN: tile::KernelMeta = tile::KernelMeta { name: "broken", ir: "{ not json", targets: &[] };
static WITH_BROKEN: tile::tune::TunedKernel = tile::tune::TunedKernel {
    name: "axpy_with_broken",
    candidates: &[
        tile::tune::Candidate { config: "broken", meta: &BROKEN },
        tile::tune::Candidate {
            config: "BLOCK = 64, THREADS = 32",
            meta: <axpy::Instances as axpy::Instance<64, 32>>::META,
        },
    ],
};

#[test]
fn a_candidate_that_fails_to_launch_is_skipped() {
    use tile::__private::KernelArg;
    let dev = Device::interpreter();
    let s = dev.stream().unwrap();
    let dir = TempDir::new("skip");
    let t = tuner(Mode::Quiet, &dir);
    let x = vec![1.0f32; 70];
    let y = vec![2.0f32; 70];
    let x_t = DeviceTensor::from_slice(&s, &x, &[70]).unwrap();
    let mut y_t = DeviceTensor::from_slice(&s, &y, &[70]).unwrap();
    t.launch(&s, &WITH_BROKEN, &mut [KernelArg::tensor(&x_t), KernelArg::tensor_mut(&mut y_t), KernelArg::F32(3.0)])
        .unwrap();
    assert_eq!(y_t.to_vec(&s).unwrap(), vec![5.0f32; 70]);
    let r = &t.records()[0];
    assert_eq!(r.index, 1);
    assert!(r.candidates[0].ms.is_none());
    assert!(r.candidates[0].skipped.as_deref().is_some_and(|w| w.contains("broken")), "{r:?}");
    // Off: the first candidate that launches, without timing or a record.
    let off = tuner(Mode::Off, &dir);
    off.launch(&s, &WITH_BROKEN, &mut [KernelArg::tensor(&x_t), KernelArg::tensor_mut(&mut y_t), KernelArg::F32(1.0)])
        .unwrap();
    assert_eq!(y_t.to_vec(&s).unwrap(), vec![6.0f32; 70]);
    assert!(off.records().is_empty());
    // Only broken candidates: the error names each one's reason.
    static ONLY_BROKEN: tile::tune::TunedKernel = tile::tune::TunedKernel {
        name: "only_broken",
        candidates: &[tile::tune::Candidate { config: "broken", meta: &BROKEN }],
    };
    let err = t
        .launch(&s, &ONLY_BROKEN, &mut [KernelArg::tensor(&x_t), KernelArg::tensor_mut(&mut y_t), KernelArg::F32(1.0)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("no candidate configuration launches") && err.contains("`broken`"), "{err}");
    assert_eq!(y_t.to_vec(&s).unwrap(), vec![6.0f32; 70]);
}

#[test]
fn cache_only_never_tunes_and_many_threads_tune_once() {
    let dev = Device::interpreter();
    let dir = TempDir::new("threads");
    let cache_only = tuner(Mode::CacheOnly, &dir);
    let s = dev.stream().unwrap();
    let x = vec![1.0f32; 40];
    let x_t = DeviceTensor::from_slice(&s, &x, &[40]).unwrap();
    let mut y_t = DeviceTensor::<f32>::zeros(&s, &[40]).unwrap();
    axpy::launch_tuned_with(&cache_only, &s, &x_t, &mut y_t, 1.0).unwrap();
    assert_eq!(y_t.to_vec(&s).unwrap(), vec![1.0f32; 40]);
    let r = cache_only.records();
    assert_eq!((r.len(), r[0].source, r[0].index), (1, Source::Default, 0));
    assert!(!tile::tune::cache_file(&dir.0).exists(), "cache-only wrote the cache");
    // Eight threads launch the same key at once: one tuning.
    let t = tuner(Mode::Quiet, &dir);
    std::thread::scope(|scope| {
        for i in 0..8 {
            let (t, dev, x_t) = (&t, &dev, &x_t);
            scope.spawn(move || {
                let s = dev.new_stream().unwrap();
                let mut y_t = DeviceTensor::<f32>::zeros(&s, &[40]).unwrap();
                axpy::launch_tuned_with(t, &s, x_t, &mut y_t, i as f32).unwrap();
                assert_eq!(y_t.to_vec(&s).unwrap(), vec![i as f32; 40]);
            });
        }
    });
    assert_eq!(t.records().len(), 1);
    // Save for shipping, then a cache-only tuner reads the shipped file.
    let shipped = dir.0.join("shipped.json");
    t.save(&shipped).unwrap();
    let other = TempDir::new("threads-other");
    let deployed = Tuner::new(Settings {
        mode: Mode::CacheOnly,
        warmup: None,
        reps: None,
        cache_dir: Some(other.0.clone()),
        shipped: Some(shipped),
    });
    axpy::launch_tuned_with(&deployed, &s, &x_t, &mut y_t, 1.0).unwrap();
    let r = deployed.records();
    assert_eq!((r[0].source, r[0].index), (Source::Shipped, t.records()[0].index));
}

#[test]
fn a_stale_or_foreign_cache_entry_is_not_used() {
    let dev = Device::interpreter();
    let s = dev.stream().unwrap();
    let dir = TempDir::new("stale");
    let x_t = DeviceTensor::from_slice(&s, &[1.0f32; 50], &[50]).unwrap();
    let mut y_t = DeviceTensor::<f32>::zeros(&s, &[50]).unwrap();
    axpy::launch_tuned_with(&tuner(Mode::Quiet, &dir), &s, &x_t, &mut y_t, 1.0).unwrap();
    let path = tile::tune::cache_file(&dir.0);
    let good = tile::tune::CacheFile::load(&path);
    assert_eq!(good.entries.len(), 1);
    // The same entry, read back by a fresh tuner: a hit.
    let hit = tuner(Mode::CacheOnly, &dir);
    axpy::launch_tuned_with(&hit, &s, &x_t, &mut y_t, 1.0).unwrap();
    assert_eq!(hit.records()[0].source, Source::Cache);
    // A rebuilt kernel (another hash), another GPU, or a winner that is no
    // longer a candidate: a miss (cache-only then takes the first).
    let edits: [fn(&mut tile::tune::Record); 3] = [
        |r| r.hash = "0000000000000000".into(),
        |r| r.device.name = "another GPU".into(),
        |r| r.config = "BLOCK = 4096, THREADS = 1024".into(),
    ];
    for edit in edits {
        let mut file = good.clone();
        edit(&mut file.entries[0]);
        file.write(&path).unwrap();
        let miss = tuner(Mode::CacheOnly, &dir);
        axpy::launch_tuned_with(&miss, &s, &x_t, &mut y_t, 1.0).unwrap();
        let r = miss.records();
        assert_eq!((r[0].source, r[0].index), (Source::Default, 0), "{:?}", file.entries[0]);
    }
    assert_eq!(y_t.to_vec(&s).unwrap(), vec![5.0f32; 50]);
}

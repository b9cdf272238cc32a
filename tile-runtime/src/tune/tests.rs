//! The tuner's parts without a kernel: buckets, keys, hashes, the cache
//! file and the modes. (Tuning through generated kernels on the
//! interpreter: `tests/tune_interp.rs` at the root.)

use super::key::{hash_candidates, Key};
use super::*;
use crate::device::Device;
use crate::tensor::DeviceTensor;
use half::f16;

fn temp_dir(tag: &str) -> PathBuf {
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("tile-tune-unit-{tag}-{}-{nonce}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn record(device: &str, hash: &str, bucket: &str, index: usize) -> Record {
    Record {
        device: DeviceId {
            name: device.into(),
            compute_capability: Some((9, 0)),
            multiprocessors: 132,
            driver_version: 12080,
        },
        kernel: "matmul::<f16, f16>".into(),
        hash: hash.into(),
        bucket: bucket.into(),
        config: format!("BM = {}", 64 << index),
        index,
        candidates: vec![
            CandidateTime { config: "BM = 64".into(), ms: Some(2.0), skipped: None },
            CandidateTime { config: "BM = 128".into(), ms: None, skipped: Some("too much shared memory".into()) },
        ],
        tuning_ms: 12.5,
        source: Source::Tuned,
    }
}

#[test]
fn buckets() {
    assert_eq!([1, 5, 16, 17, 32, 33, 1000, 4096, 4097].map(bucket_dim), [1, 5, 16, 32, 32, 64, 1024, 4096, 8192]);
    let dev = Device::interpreter();
    let s = dev.stream().unwrap();
    let a = DeviceTensor::<f16>::zeros(&s, &[1000, 4095]).unwrap();
    let b = DeviceTensor::<f16>::zeros(&s, &[4095, 64]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&s, &[1000, 3]).unwrap();
    let v = DeviceTensor::<f32>::zeros(&s, &[7]).unwrap();
    let args = [
        KernelArg::tensor(&a),
        KernelArg::tensor(&b),
        KernelArg::tensor_mut(&mut c),
        KernelArg::F32(1.0),
        KernelArg::tensor(&v),
    ];
    // 4095 f16 and 3 f32 are rows of 8190 and 12 bytes: not 16-byte multiples.
    assert_eq!(bucket(&args), "1024x4096*,4096x64,1024x3*,7");
}

#[test]
fn keys_miss_on_another_device_or_a_rebuilt_kernel() {
    let mut file = CacheFile::default();
    file.insert(record("NVIDIA H200", "00ff", "128x4096", 0));
    let key = |device: &str, hash: &str, bucket: &str| Key {
        device: record(device, hash, bucket, 0).device,
        kernel: "matmul::<f16, f16>".into(),
        hash: hash.into(),
        bucket: bucket.into(),
    };
    assert!(file.find(&key("NVIDIA H200", "00ff", "128x4096")).is_some());
    assert!(file.find(&key("NVIDIA H100", "00ff", "128x4096")).is_none(), "another GPU");
    assert!(file.find(&key("NVIDIA H200", "00fe", "128x4096")).is_none(), "a rebuilt kernel");
    assert!(file.find(&key("NVIDIA H200", "00ff", "256x4096")).is_none(), "another bucket");
    let mut other_sms = key("NVIDIA H200", "00ff", "128x4096");
    other_sms.device.multiprocessors = 66;
    assert!(file.find(&other_sms).is_none(), "a MIG slice");
    let mut other_driver = key("NVIDIA H200", "00ff", "128x4096");
    other_driver.device.driver_version = 12090;
    assert!(file.find(&other_driver).is_none(), "another driver");
    // Inserting the same key replaces the entry.
    file.insert(record("NVIDIA H200", "00ff", "128x4096", 1));
    assert_eq!(file.entries.len(), 1);
    assert_eq!(file.entries[0].index, 1);
}

static PTX_A: [crate::launch::KernelTarget; 1] = [crate::launch::KernelTarget {
    arch: "sm_90a",
    schedule: "general",
    ptx: "// a",
    shared_bytes: 0,
    threads: 128,
    tensor_maps: &[],
    persistent: false,
    cubin: None,
}];
static PTX_B: [crate::launch::KernelTarget; 1] = [crate::launch::KernelTarget {
    arch: "sm_90a",
    schedule: "general",
    ptx: "// b",
    shared_bytes: 0,
    threads: 128,
    tensor_maps: &[],
    persistent: false,
    cubin: None,
}];
static META_A: KernelMeta = KernelMeta { name: "k__64", ir: "{}", targets: &PTX_A };
static META_B: KernelMeta = KernelMeta { name: "k__64", ir: "{}", targets: &PTX_B };

#[test]
fn the_hash_covers_the_ptx_and_the_configurations() {
    static A: TunedKernel = TunedKernel { name: "k", candidates: &[Candidate { config: "BM = 64", meta: &META_A }] };
    static B: TunedKernel = TunedKernel { name: "k", candidates: &[Candidate { config: "BM = 64", meta: &META_B }] };
    static C: TunedKernel = TunedKernel { name: "k", candidates: &[Candidate { config: "BM = 65", meta: &META_A }] };
    static TWO: TunedKernel = TunedKernel {
        name: "k",
        candidates: &[Candidate { config: "BM = 64", meta: &META_A }, Candidate { config: "BM = 64", meta: &META_A }],
    };
    let (a, b, c, two) = (&A, &B, &C, &TWO);
    let h = [a, b, c, two].map(hash_candidates);
    assert_eq!(h[0], hash_candidates(a), "stable");
    assert_eq!(h[0].len(), 16);
    for i in 0..4 {
        for j in 0..i {
            assert_ne!(h[i], h[j], "{i} and {j}");
        }
    }
}

#[test]
fn cache_file_round_trip_and_atomic_write() {
    let dir = temp_dir("file");
    let path = cache_file(&dir.join("nested"));
    assert_eq!(CacheFile::load(&path), CacheFile::default(), "a missing file reads as empty");
    let r0 = record("NVIDIA H200", "00ff", "128x4096", 0);
    let r1 = record("NVIDIA H200", "00ff", "8192x8192", 1);
    CacheFile::save_record(&path, &r0).unwrap();
    CacheFile::save_record(&path, &r1).unwrap();
    let file = CacheFile::load(&path);
    assert_eq!(file.format, FORMAT);
    // `source` is not stored: it reads back as the default.
    assert_eq!(file.entries, vec![r0.clone(), r1.clone()]);
    // Human-readable: pretty JSON naming the winner.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"config\": \"BM = 128\"") && text.contains("\"name\": \"NVIDIA H200\""), "{text}");
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["tune.json"]);
    // Concurrent writers (threads standing in for processes): the file is
    // always whole JSON.
    std::thread::scope(|scope| {
        for t in 0..8 {
            let path = &path;
            scope.spawn(move || {
                for i in 0..10 {
                    CacheFile::save_record(path, &record("NVIDIA H200", "00ff", &format!("{t}x{i}"), 0)).unwrap();
                    let text = std::fs::read_to_string(path).unwrap();
                    serde_json::from_str::<CacheFile>(&text).expect("a whole file");
                }
            });
        }
    });
    // A torn or foreign file reads as empty (and is replaced by the next save).
    std::fs::write(&path, "{\"format\": \"tile-tune/1\", \"entr").unwrap();
    assert_eq!(CacheFile::load(&path), CacheFile::default());
    std::fs::write(&path, "{\"format\": \"tile-tune/0\", \"entries\": []}").unwrap();
    assert_eq!(CacheFile::load(&path), CacheFile::default());
    CacheFile::save_record(&path, &r0).unwrap();
    assert_eq!(CacheFile::load(&path).entries, vec![r0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn modes() {
    assert_eq!(Mode::parse("").unwrap(), Mode::On);
    assert_eq!(Mode::parse("on").unwrap(), Mode::On);
    assert_eq!(Mode::parse("Quiet").unwrap(), Mode::Quiet);
    assert_eq!(Mode::parse("off").unwrap(), Mode::Off);
    assert_eq!(Mode::parse(" cache-only ").unwrap(), Mode::CacheOnly);
    let err = Mode::parse("sometimes").unwrap_err().to_string();
    assert!(err.contains("TILE_TUNE=`sometimes`") && err.contains("cache-only"), "{err}");
}

/// `Tuner::pick` on the interpreter (whose events are host clocks): the
/// configurations are closures that sleep.
#[test]
fn host_candidates_are_timed_kept_and_cached() {
    let dir = temp_dir("pick");
    let settings = |mode| Settings { mode, warmup: None, reps: Some(3), cache_dir: Some(dir.clone()), shipped: None };
    let dev = Device::interpreter();
    let s = dev.stream().unwrap();
    let configs = ["slow".to_string(), "fast".to_string(), "fails".to_string()];
    let cands = |kernels: &'static [&'static KernelMeta], bucket: &str| HostCandidates {
        name: "shaped",
        configs: &configs,
        kernels,
        bucket: bucket.into(),
    };
    static A: [&KernelMeta; 1] = [&META_A];
    static B: [&KernelMeta; 1] = [&META_B];
    let runs = std::cell::RefCell::new(Vec::new());
    let run = |i: usize| -> Result<()> {
        runs.borrow_mut().push(i);
        match i {
            0 => std::thread::sleep(std::time::Duration::from_millis(4)),
            1 => {}
            _ => return Err(Error::Usage("no such variant".into())),
        }
        Ok(())
    };
    let tuner = Tuner::new(settings(Mode::Quiet));
    let r = tuner.pick(&s, &cands(&A, "16x4096"), run).unwrap();
    assert_eq!((r.index, r.config.as_str(), r.source), (1, "fast", Source::Tuned));
    assert_eq!(r.candidates.len(), 3);
    assert!(r.candidates[0].ms.unwrap() > r.candidates[1].ms.unwrap(), "{:?}", r.candidates);
    assert!(r.candidates[2].skipped.as_deref().unwrap().contains("no such variant"), "{:?}", r.candidates);
    // One warm-up and three timed runs of each that runs; one of the failing one.
    assert_eq!(*runs.borrow(), [0, 0, 0, 0, 1, 1, 1, 1, 2]);
    // The same key again: the choice in memory, nothing run.
    runs.borrow_mut().clear();
    assert_eq!(tuner.pick(&s, &cands(&A, "16x4096"), run).unwrap().index, 1);
    assert!(runs.borrow().is_empty());
    // Another tuner on the same cache directory reads the choice.
    let other = Tuner::new(settings(Mode::Quiet));
    let r = other.pick(&s, &cands(&A, "16x4096"), run).unwrap();
    assert_eq!((r.index, r.source), (1, Source::Cache));
    assert!(runs.borrow().is_empty());
    // Another bucket, or a rebuilt kernel (another hash), is tuned anew.
    other.pick(&s, &cands(&A, "32x4096"), run).unwrap();
    assert!(!runs.borrow().is_empty(), "another bucket");
    runs.borrow_mut().clear();
    other.pick(&s, &cands(&B, "16x4096"), run).unwrap();
    assert!(!runs.borrow().is_empty(), "a rebuilt kernel");
    // `off`: the first configuration, nothing run; `cache-only` without a
    // cached choice: the first too.
    runs.borrow_mut().clear();
    let r = Tuner::new(settings(Mode::Off)).pick(&s, &cands(&A, "64x4096"), run).unwrap();
    assert_eq!((r.index, r.source), (0, Source::Default));
    let r = Tuner::new(settings(Mode::CacheOnly)).pick(&s, &cands(&A, "64x4096"), run).unwrap();
    assert_eq!((r.index, r.source), (0, Source::Default));
    assert!(runs.borrow().is_empty());
    // None runs: an error naming each reason; no configurations: an error.
    let err =
        tuner.pick(&s, &cands(&A, "128x4096"), |_| Err(Error::Usage("out of memory".into()))).unwrap_err().to_string();
    assert!(err.contains("`slow`: ") && err.contains("out of memory"), "{err}");
    let none = HostCandidates { name: "shaped", configs: &[], kernels: &A, bucket: "1".into() };
    assert!(tuner.pick(&s, &none, run).unwrap_err().to_string().contains("no configurations"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Timing in rounds: every candidate once per round, in turn (the rounds
/// interleaved, not one candidate's back to back), each keeping its least
/// time; a candidate whose run fails is skipped with its error and not run
/// again.
#[test]
fn candidates_are_timed_in_interleaved_rounds() {
    let tuner = Tuner::new(Settings { mode: Mode::Quiet, warmup: None, reps: None, cache_dir: None, shipped: None });
    let key =
        Key { device: record("H200", "", "", 0).device, kernel: "k".into(), hash: "h".into(), bucket: "b".into() };
    let mut calls = Vec::new();
    let times = tuner.time_all(&key, &["a", "b", "c"], 3, |i| {
        calls.push(i);
        let round = calls.iter().filter(|&&c| c == i).count();
        match (i, round) {
            (1, _) => Err(Error::Launch { kernel: "k".into(), message: "no variant".into() }),
            (0, r) => Ok([3.0, 1.0, 2.0][r - 1]),
            (_, r) => Ok(0.5 + r as f64),
        }
    });
    assert_eq!(calls, [0, 1, 2, 0, 2, 0, 2]);
    assert_eq!(times[0].ms, Some(1.0));
    assert_eq!((times[1].ms, times[1].skipped.as_deref().map(|s| s.contains("no variant"))), (None, Some(true)));
    assert_eq!(times[2].ms, Some(1.5));
    assert_eq!(times.iter().map(|t| t.config.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
}

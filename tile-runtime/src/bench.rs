//! Timing and checking helpers for tests, examples and benchmarks.
//!
//! [`bench()`] times one closure per iteration with events on the stream (CUDA
//! events on a GPU, host clocks on the interpreter) after a warm-up, and
//! reports the median, minimum and mean. [`rel_error`] and [`assert_close`]
//! compare a result against an `f64` reference by relative L2 error, the
//! measure that stays meaningful for low-precision outputs of any size.

use crate::device::Stream;
use crate::element::Element;
use crate::error::{Error, Result};

/// Timings of [`bench()`], in milliseconds per iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchResult {
    /// The median time of one run, in milliseconds.
    pub median_ms: f64,
    /// The fastest run, in milliseconds.
    pub min_ms: f64,
    /// The mean time, in milliseconds.
    pub mean_ms: f64,
    /// The slowest run, in milliseconds.
    pub max_ms: f64,
    /// The number of timed iterations.
    pub iters: usize,
}

impl BenchResult {
    /// Throughput in TFLOP/s for `flops` floating-point operations per iteration, at the median.
    pub fn tflops(&self, flops: f64) -> f64 {
        flops / (self.median_ms * 1e-3) / 1e12
    }

    /// Bandwidth in GB/s (1e9 bytes) for `bytes` moved per iteration, at the median.
    pub fn gbps(&self, bytes: f64) -> f64 {
        bytes / (self.median_ms * 1e-3) / 1e9
    }
}

/// Runs `f` `warmup` times, then `iters` times, each timed separately with
/// events recorded on `stream` between iterations; `f` must issue its work on
/// `stream`. Returns the statistics of the timed iterations.
pub fn bench(stream: &Stream, warmup: usize, iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<BenchResult> {
    if iters == 0 {
        return Err(Error::Usage("bench: `iters` must be at least 1".into()));
    }
    for _ in 0..warmup {
        f()?;
    }
    // Events e0 f e1 f e2 ...: iteration i is timed from e_i to e_{i+1}.
    let mut events = Vec::with_capacity(iters + 1);
    events.push(stream.record_event()?);
    for _ in 0..iters {
        f()?;
        events.push(stream.record_event()?);
    }
    stream.synchronize()?;
    let mut times = Vec::with_capacity(iters);
    for pair in events.windows(2) {
        times.push(pair[0].elapsed_ms(&pair[1])?);
    }
    Ok(summarize(times))
}

fn summarize(mut times: Vec<f64>) -> BenchResult {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median_ms = if n % 2 == 1 { times[n / 2] } else { 0.5 * (times[n / 2 - 1] + times[n / 2]) };
    BenchResult {
        median_ms,
        min_ms: times[0],
        mean_ms: times.iter().sum::<f64>() / n as f64,
        max_ms: times[n - 1],
        iters: n,
    }
}

/// Relative L2 error ‖a − r‖ / ‖r‖. Positions where both values are NaN, or
/// both the same infinity, count as equal. Any other NaN or infinity, or a
/// length mismatch, gives `f64::INFINITY`. With ‖r‖ = 0 the absolute error
/// ‖a‖ is returned (0 when both are zero).
pub fn rel_error(actual: &[f64], reference: &[f64]) -> f64 {
    if actual.len() != reference.len() {
        return f64::INFINITY;
    }
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    for (&a, &r) in actual.iter().zip(reference) {
        if same_special(a, r) {
            continue;
        }
        if !a.is_finite() || !r.is_finite() {
            return f64::INFINITY;
        }
        diff2 += (a - r) * (a - r);
        ref2 += r * r;
    }
    let err = if ref2 == 0.0 { diff2.sqrt() } else { (diff2 / ref2).sqrt() };
    if err.is_nan() {
        f64::INFINITY
    } else {
        err
    }
}

/// Both NaN, or the same infinity.
fn same_special(a: f64, r: f64) -> bool {
    (a.is_nan() && r.is_nan()) || (a.is_infinite() && a == r)
}

/// Checks `actual` against `reference` by relative L2 error ([`rel_error`]).
/// Returns the error when it is at most `tol`; otherwise (or on a length
/// mismatch, or a NaN/infinity on one side only) a message naming the worst
/// element: its index and both values.
pub fn assert_close<T: Element>(actual: &[T], reference: &[f64], tol: f64) -> std::result::Result<f64, String> {
    if actual.len() != reference.len() {
        return Err(format!(
            "length mismatch: the result has {} elements, the reference {}",
            actual.len(),
            reference.len()
        ));
    }
    let actual: Vec<f64> = actual.iter().map(|v| v.to_f64()).collect();
    for (i, (&a, &r)) in actual.iter().zip(reference).enumerate() {
        if !same_special(a, r) && (!a.is_finite() || !r.is_finite()) {
            return Err(format!(
                "element {i}: got {a}, reference {r} (a NaN or infinity on one side only; {} elements)",
                actual.len()
            ));
        }
    }
    let err = rel_error(&actual, reference);
    if err <= tol {
        return Ok(err);
    }
    let (worst, a, r) = actual
        .iter()
        .zip(reference)
        .enumerate()
        .filter(|(_, (a, r))| !same_special(**a, **r))
        .map(|(i, (&a, &r))| (i, a, r))
        .max_by(|x, y| (x.1 - x.2).abs().total_cmp(&(y.1 - y.2).abs()))
        .unwrap_or((0, f64::NAN, f64::NAN));
    Err(format!(
        "relative L2 error {err:.3e} exceeds the tolerance {tol:.1e} ({} elements); the worst element is \
         {worst}: got {a}, reference {r} (difference {:.3e})",
        actual.len(),
        (a - r).abs()
    ))
}

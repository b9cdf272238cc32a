//! One check per kernel: random inputs of the given size, launched on the
//! given device, compared with an independent CPU reference. Returns the
//! outputs so that GPU tests can also compare them with the interpreter's.
#![allow(dead_code)]
use super::*;
use crate::common::Rng;
use crate::examples;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

pub fn vector_add(dev: &Device, n: usize, seed: u64) -> Res<Vec<f32>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let (a, b) = (rng.vec(n, -1.0, 1.0), rng.vec(n, -1.0, 1.0));
    let da = DeviceTensor::from_slice(&s, &a, &[n])?;
    let db = DeviceTensor::from_slice(&s, &b, &[n])?;
    let mut dc = DeviceTensor::from_slice(&s, &vec![f32::NAN; n], &[n])?;
    examples::vector_add::vector_add::launch(&s, &da, &db, &mut dc)?;
    let c = dc.to_vec(&s)?;
    assert_close(&c, &examples::vector_add::reference(&a, &b), 1e-6)?;
    Ok(c)
}

pub fn softmax(dev: &Device, m: usize, n: usize, seed: u64) -> Res<Vec<f16>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x: Vec<f16> = rng.vec(m * n, -6.0, 6.0).into_iter().map(f16::from_f32).collect();
    let dx = DeviceTensor::from_slice(&s, &x, &[m, n])?;
    let mut dy = DeviceTensor::from_slice(&s, &vec![f16::NAN; m * n], &[m, n])?;
    examples::softmax::softmax::launch(&s, &dx, &mut dy)?;
    let y = dy.to_vec(&s)?;
    assert_close(&y, &examples::softmax::reference(&x, n, 0..m), 5e-3)?;
    Ok(y)
}

pub fn scale_shift(dev: &Device, m: usize, n: usize, seed: u64) -> Res<Vec<bf16>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x = rng.vec(m * n, -3.0, 3.0);
    let (alpha, beta) = (rng.uniform(-2.0, 2.0), rng.uniform(-1.0, 1.0));
    let dx = DeviceTensor::from_slice(&s, &x, &[m, n])?;
    let mut dy = DeviceTensor::from_slice(&s, &vec![bf16::NAN; m * n], &[m, n])?;
    scale_shift::launch(&s, &dx, &mut dy, alpha, beta)?;
    let y = dy.to_vec(&s)?;
    assert_close(&y, &scale_shift_ref(&x, alpha, beta), 1e-2)?;
    Ok(y)
}

/// One instance of the generic `axpy` (`launch::<T, BLOCK, THREADS>`) at `n`
/// elements, against the f64 reference within one rounding of `T` per
/// operation.
pub fn axpy<T: Element, const BLOCK: usize, const THREADS: usize>(dev: &Device, n: usize, seed: u64) -> Res<Vec<T>>
where
    super::axpy::Instances: super::axpy::Instance<T, BLOCK, THREADS>,
{
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let mut random =
        |n: usize| -> Vec<T> { rng.vec(n, -2.0, 2.0).into_iter().map(|v| T::from_f64(v as f64)).collect() };
    let (x, y, alpha) = (random(n), random(n), random(1)[0]);
    let dx = DeviceTensor::from_slice(&s, &x, &[n])?;
    let mut dy = DeviceTensor::from_slice(&s, &y, &[n])?;
    super::axpy::launch::<T, BLOCK, THREADS>(&s, &dx, &mut dy, alpha)?;
    let got = dy.to_vec(&s)?;
    let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| alpha.to_f64() * a.to_f64() + b.to_f64()).collect();
    let tol = match T::DTYPE {
        tile::ir::DType::F16 => 2e-3,
        tile::ir::DType::BF16 => 1e-2,
        _ => 1e-6,
    };
    assert_close(&got, &want, tol).map_err(|e| format!("axpy::<{:?}, {BLOCK}, {THREADS}> n={n}: {e}", T::DTYPE))?;
    Ok(got)
}

pub fn col_sum(dev: &Device, m: usize, n: usize, seed: u64) -> Res<Vec<f32>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x = rng.vec(m * n, -1.0, 1.0);
    let dx = DeviceTensor::from_slice(&s, &x, &[m, n])?;
    let mut out = DeviceTensor::<f32>::zeros(&s, &[n])?;
    col_sum::launch(&s, &dx, &mut out)?;
    let y = out.to_vec(&s)?;
    assert_close(&y, &col_sum_ref(&x, m, n), 1e-5)?;
    Ok(y)
}

pub fn transpose(dev: &Device, m: usize, n: usize, seed: u64) -> Res<Vec<f16>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x: Vec<f16> = rng.vec(m * n, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let dx = DeviceTensor::from_slice(&s, &x, &[m, n])?;
    let mut dy = DeviceTensor::from_slice(&s, &vec![f16::NAN; m * n], &[n, m])?;
    transpose::launch(&s, &dx, &mut dy)?;
    let y = dy.to_vec(&s)?;
    let reference: Vec<f64> = (0..n * m).map(|k| x[(k % m) * n + k / m].to_f64()).collect();
    assert_close(&y, &reference, 0.0)?;
    Ok(y)
}

pub fn row_range(dev: &Device, m: usize, n: usize, seed: u64) -> Res<(Vec<f32>, Vec<f32>)> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x = rng.vec(m * n, -100.0, 100.0);
    let dx = DeviceTensor::from_slice(&s, &x, &[m, n])?;
    let mut hi = DeviceTensor::from_slice(&s, &vec![f32::NAN; m], &[m])?;
    let mut lo = DeviceTensor::from_slice(&s, &vec![f32::NAN; m], &[m])?;
    row_range::launch(&s, &dx, &mut hi, &mut lo)?;
    let (h, l) = (hi.to_vec(&s)?, lo.to_vec(&s)?);
    let rows = |f: fn(f64, f64) -> f64, init: f64| -> Vec<f64> {
        (0..m).map(|i| x[i * n..(i + 1) * n].iter().fold(init, |a, &v| f(a, v as f64))).collect()
    };
    assert_close(&h, &rows(f64::max, f64::NEG_INFINITY), 0.0)?;
    assert_close(&l, &rows(f64::min, f64::INFINITY), 0.0)?;
    Ok((h, l))
}

pub fn histogram(dev: &Device, n: usize, bins: usize, seed: u64) -> Res<Vec<u32>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x: Vec<i32> = (0..n).map(|_| (rng.next_u64() % bins as u64) as i32).collect();
    let dx = DeviceTensor::from_slice(&s, &x, &[n])?;
    let mut dh = DeviceTensor::<u32>::zeros(&s, &[bins])?;
    histogram::launch(&s, &dx, &mut dh)?;
    let h = dh.to_vec(&s)?;
    let mut reference = vec![0f64; bins];
    for &v in &x {
        reference[v as usize] += 1.0;
    }
    assert_close(&h, &reference, 0.0)?;
    Ok(h)
}

pub fn scalar_walk(dev: &Device, k: usize, n: i32) -> Res<Vec<i32>> {
    let s = dev.stream()?;
    let mut out = DeviceTensor::from_slice(&s, &vec![i32::MIN; k], &[k])?;
    scalar_walk::launch(&s, &mut out, n)?;
    let got = out.to_vec(&s)?;
    let want = scalar_walk_ref(k, n);
    if got != want {
        return Err(format!("scalar_walk: got {:?}.. want {:?}..", &got[..k.min(8)], &want[..k.min(8)]).into());
    }
    Ok(got)
}

/// Exact comparison, naming the first element that differs (a block that
/// ran as the wrong index, twice or never, shows as a wrong value or NaN).
fn exact(what: &str, got: &[f32], want: &[f32]) -> Res<()> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, want {}", got.len(), want.len()).into());
    }
    match (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        Some(i) => Err(format!("{what}: element {i} is {}, want {}", got[i], want[i]).into()),
        None => Ok(()),
    }
}

/// `row_tiles` (or `row_tiles_swizzled`) over `r` rows and `c` columns:
/// `y = x + row`, exactly.
pub fn row_tiles(dev: &Device, r: usize, c: usize, swizzled: bool, seed: u64) -> Res<Vec<f32>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x = rng.vec(r * c, -1.0, 1.0);
    let dx = DeviceTensor::from_slice(&s, &x, &[r, c])?;
    let mut dy = DeviceTensor::from_slice(&s, &vec![f32::NAN; r * c], &[r, c])?;
    if swizzled {
        row_tiles_swizzled::launch(&s, &dx, &mut dy)?;
    } else {
        row_tiles::launch(&s, &dx, &mut dy)?;
    }
    let y = dy.to_vec(&s)?;
    let want: Vec<f32> = (0..r * c).map(|i| x[i] + (i / c) as f32).collect();
    exact(&format!("row_tiles {r}x{c} swizzled {swizzled}"), &y, &want)?;
    Ok(y)
}

/// `batch_rows` over `[b, r, c]` (`r ≤ 8`): `y = x + (8·batch + row)`, exactly.
pub fn batch_rows(dev: &Device, b: usize, r: usize, c: usize, seed: u64) -> Res<Vec<f32>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x = rng.vec(b * r * c, -1.0, 1.0);
    let dx = DeviceTensor::from_slice(&s, &x, &[b, r, c])?;
    let mut dy = DeviceTensor::from_slice(&s, &vec![f32::NAN; b * r * c], &[b, r, c])?;
    batch_rows::launch(&s, &dx, &mut dy)?;
    let y = dy.to_vec(&s)?;
    let want: Vec<f32> = (0..b * r * c).map(|i| x[i] + (8 * (i / (r * c)) + (i / c) % r) as f32).collect();
    exact(&format!("batch_rows {b}x{r}x{c}"), &y, &want)?;
    Ok(y)
}

/// `huge_grid` on a 70,000 × 1 tensor: 65,536 × 70,000 blocks, more
/// than any launch runs; must be an error naming the kernel and the limit.
pub fn huge_grid_is_an_error(dev: &Device) -> Res<()> {
    let s = dev.stream()?;
    let (r, c) = (70_000, 1);
    let dx = DeviceTensor::<f32>::zeros(&s, &[r, c])?;
    let mut dy = DeviceTensor::<f32>::zeros(&s, &[r, c])?;
    let e = match huge_grid::launch(&s, &dx, &mut dy) {
        Ok(()) => return Err("huge_grid launched a grid of 4.6e9 blocks".into()),
        Err(e) => e.to_string(),
    };
    if !(e.contains("huge_grid") && e.contains("2147483647") && e.contains("4587520000 blocks")) {
        return Err(format!("huge_grid: unexpected error: {e}").into());
    }
    Ok(())
}

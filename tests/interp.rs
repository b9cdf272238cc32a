//! Every example and test kernel, run in the CPU interpreter at awkward sizes
//! (not multiples of the tile), against a CPU reference.
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/mod.rs"]
mod kernels;
#[path = "../examples/kernels"]
mod examples {
    pub mod rmsnorm;
    pub mod softmax;
    pub mod vector_add;
}
use kernels::checks;
use tile::prelude::*;

fn dev() -> Device {
    Device::interpreter()
}

#[test]
fn vector_add() {
    for n in [1, 1000, 4097, 70_001] {
        checks::vector_add(&dev(), n, n as u64).unwrap();
    }
}

#[test]
fn softmax_single_tile() {
    for (m, n) in [(1, 1), (3, 1000), (7, 4096), (2, 33)] {
        checks::softmax(&dev(), m, n, 3).unwrap();
    }
}

#[test]
fn softmax_long_rows() {
    checks::softmax(&dev(), 2, 9001, 5).unwrap();
}

#[test]
fn scale_shift() {
    checks::scale_shift(&dev(), 37, 101, 1).unwrap();
}

/// Every instance of a generic kernel, each at awkward sizes.
#[test]
fn generic_axpy_every_instance() {
    for n in [1, 1000, 4097] {
        checks::axpy::<f32, 1024, 256>(&dev(), n, n as u64).unwrap();
        checks::axpy::<f16, 512, 128>(&dev(), n, 1).unwrap();
        checks::axpy::<bf16, 2048, 256>(&dev(), n, 2).unwrap();
    }
}

#[test]
fn col_sum() {
    checks::col_sum(&dev(), 77, 300, 2).unwrap();
}

#[test]
fn transpose() {
    checks::transpose(&dev(), 45, 70, 3).unwrap();
}

#[test]
fn row_range() {
    checks::row_range(&dev(), 9, 700, 4).unwrap();
}

#[test]
fn histogram() {
    checks::histogram(&dev(), 3001, 37, 5).unwrap();
}

#[test]
fn scalar_walk() {
    checks::scalar_walk(&dev(), 5, 17).unwrap();
}

/// Grids past CUDA's per-axis limits (issue 12): the interpreter runs the
/// user's grid as written, 70,000 rows on y and 65,539 batches on z, with
/// the same answers as small grids.
#[test]
fn grids_past_the_hardware_axis_limits() {
    checks::row_tiles(&dev(), 70_000, 37, false, 1).unwrap();
    checks::row_tiles(&dev(), 5, 100, false, 2).unwrap();
    checks::row_tiles(&dev(), 70_001, 3, true, 3).unwrap();
    checks::row_tiles(&dev(), 9, 70, true, 4).unwrap();
    checks::batch_rows(&dev(), 65_539, 2, 5, 5).unwrap();
    checks::batch_rows(&dev(), 3, 7, 40, 6).unwrap();
    checks::huge_grid_is_an_error(&dev()).unwrap();
}

/// With `TILE_PTXAS` at build time every sm_80 and sm_90a variant embeds
/// the cubin ptxas made of its PTX (an ELF image: the runtime loads it
/// without the JIT); without it, none does.
#[test]
fn variants_carry_their_cubin_when_built_with_ptxas() {
    let with_ptxas = option_env!("TILE_PTXAS").is_some_and(|p| !p.trim().is_empty());
    let metas = [&examples::vector_add::vector_add::META, &examples::softmax::softmax::META];
    for meta in metas {
        let archs = option_env!("TILE_ARCHS").unwrap_or("sm_80,sm_90a");
        assert_eq!(meta.targets.is_empty(), archs.trim().is_empty(), "{}", meta.name);
        for t in meta.targets {
            match (with_ptxas, t.cubin) {
                (true, Some(cubin)) => {
                    assert!(cubin.starts_with(b"\x7fELF\x02"), "{} {}: not a 64-bit ELF image", meta.name, t.arch);
                    assert!(cubin.len() > 1024, "{} {}: a {}-byte cubin", meta.name, t.arch, cubin.len());
                }
                (false, None) => {}
                (true, None) => panic!("{} {}: built with TILE_PTXAS but no cubin embedded", meta.name, t.arch),
                (false, Some(_)) => panic!("{} {}: a cubin without TILE_PTXAS", meta.name, t.arch),
            }
        }
    }
}

/// The RMSNorm of the candle example, on rows shorter and longer than its
/// column tile, against the f64 reference.
#[test]
fn rmsnorm() {
    let s = dev().stream().unwrap();
    let mut rng = common::Rng::new(21);
    for (m, n) in [(1, 1), (3, 1000), (2, 2500), (5, 1024)] {
        let x = rng.vec(m * n, -2.0, 2.0);
        let w = rng.vec(n, 0.5, 1.5);
        let xt = DeviceTensor::from_slice(&s, &x, &[m, n]).unwrap();
        let wt = DeviceTensor::from_slice(&s, &w, &[n]).unwrap();
        let mut yt = DeviceTensor::<f32>::zeros(&s, &[m, n]).unwrap();
        examples::rmsnorm::rmsnorm::launch(&s, &xt, &wt, &mut yt, 1e-6).unwrap();
        let err = assert_close(&yt.to_vec(&s).unwrap(), &examples::rmsnorm::reference(&x, &w, n, 1e-6), 1e-5);
        err.unwrap_or_else(|e| panic!("{m} x {n}: {e}"));
    }
}

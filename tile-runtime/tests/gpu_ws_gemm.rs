//! The warp-specialized TMA + wgmma GEMM variant on the GPU (feature `gpu`,
//! compute capability 9.0+), launched directly from `tile_ir::compile_variants`
//! (its Thread IR ABI: tensor pointers, dims, then one tensor map per
//! operand): results against an f64 CPU reference on sampled rows, for
//! awkward shapes (edges zero-filled by TMA), f16 and bf16, B and Bᵀ, A and
//! Aᵀ, 2 to 4 stages (bitwise the same result). With `TILE_WS_BENCH=1`, the
//! variant is timed against cuBLAS at 4096³ and 8192³ (`RESULT` lines).
#![cfg(feature = "gpu")]

use std::ffi::{c_void, CString};
use tile_ir::print::parse_kernel;
use tile_ir::{compile_variants, CompileOptions, Compiled, DType, Target};
use tile_runtime::cudarc::driver::{result, sys};
use tile_runtime::{bench, bf16, f16, Device, DeviceTensor, Element, Stream, TensorMap, TensorMapSpec, TmaSwizzle};
use tile_testkit::{Matmul, Rng, MATMUL_128X256};

/// The example GEMM configuration (128×256×64, 3 stages, 256 threads, f16),
/// which the other configurations vary.
const BASE: Matmul = MATMUL_128X256;

fn ws_variant(c: Matmul) -> Compiled {
    ws_variant_with(c, CompileOptions::default())
}

fn ws_variant_with(c: Matmul, options: CompileOptions) -> Compiled {
    let text = c.text();
    let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    let mut v = compile_variants(&k, Target::Sm90a, options).unwrap();
    assert!(v.len() >= 2 && v[0].threads > c.threads, "{c:?}: expected a warp-specialized variant");
    v.remove(0)
}

struct Loaded {
    module: sys::CUmodule,
    func: sys::CUfunction,
    compiled: Compiled,
}

fn load(device: &Device, compiled: Compiled) -> Loaded {
    let ctx = device.cuda_context().unwrap();
    ctx.bind_to_thread().unwrap();
    let src = CString::new(compiled.ptx.clone()).unwrap();
    // SAFETY: NUL-terminated PTX; the context is current.
    let module =
        unsafe { result::module::load_data(src.as_ptr() as *const c_void) }.unwrap_or_else(|e| panic!("{e:?}"));
    let func = unsafe { result::module::get_function(module, CString::new("matmul").unwrap()) }.unwrap();
    unsafe {
        result::function::set_function_attribute(
            func,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            compiled.shared_bytes as i32,
        )
    }
    .unwrap();
    Loaded { module, func, compiled }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: no launch uses the module any more (callers synchronize).
        unsafe { result::module::unload(self.module) }.unwrap();
    }
}

/// Launches `c = op(a) · op(b)` with the variant's ABI; a persistent
/// variant with `blocks` blocks (0: one per SM).
#[allow(clippy::too_many_arguments)]
fn launch<T: Element>(
    device: &Device,
    stream: &Stream,
    l: &Loaded,
    cfg: Matmul,
    blocks: u32,
    (m, n, k): (usize, usize, usize),
    a: &DeviceTensor<T>,
    b: &DeviceTensor<T>,
    c: &mut DeviceTensor<T>,
) -> tile_runtime::Result<()> {
    let dtype = if cfg.dtype == "bf16" { DType::BF16 } else { DType::F16 };
    let tensors = [
        (a.device_ptr().unwrap(), a.shape().to_vec()),
        (b.device_ptr().unwrap(), b.shape().to_vec()),
        (c.device_ptr().unwrap(), c.shape().to_vec()),
    ];
    let maps: Vec<TensorMap> = l
        .compiled
        .tensor_maps
        .iter()
        .map(|tm| {
            let (ptr, shape) = &tensors[tm.tensor];
            let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
            let swizzle = match tm.swizzle.bytes() {
                32 => TmaSwizzle::B32,
                64 => TmaSwizzle::B64,
                128 => TmaSwizzle::B128,
                _ => TmaSwizzle::None,
            };
            let spec = TensorMapSpec {
                l2_promotion: tile_runtime::L2Promotion::B256,
                ..TensorMapSpec::row_major(dtype, *ptr, &shape, &tm.box_shape, swizzle)
            };
            TensorMap::encode(device, &spec).unwrap()
        })
        .collect();
    let (mut pa, mut pb, mut pc) = (a.device_ptr().unwrap(), b.device_ptr().unwrap(), c.device_ptr().unwrap());
    // The dims in the kernel's order, then the divisors' magic numbers
    // (`tile_ir::abi::dims_divisors`: the grid extents the persistent
    // variant unfolds its tiles by).
    let kernel = parse_kernel(&cfg.text()).unwrap();
    let dims: Vec<i64> = kernel
        .dims
        .iter()
        .map(|&d| match kernel.var(d).name.as_str() {
            "M" => m as i64,
            "K" => k as i64,
            "N" => n as i64,
            other => panic!("dim {other}"),
        })
        .collect();
    let mut dims32: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
    let mut divisors = tile_ir::abi::divisor_args(&kernel, &dims);
    let mut params: Vec<*mut c_void> = vec![
        &mut pa as *mut u64 as *mut c_void,
        &mut pb as *mut u64 as *mut c_void,
        &mut pc as *mut u64 as *mut c_void,
    ];
    params.extend(dims32.iter_mut().map(|d| d as *mut i32 as *mut c_void));
    params.extend(divisors.iter_mut().map(|d| d as *mut u32 as *mut c_void));
    for mp in &maps {
        params.push(mp.param_ptr());
    }
    assert_eq!(params.len(), l.compiled.function.params.len(), "one pointer per parameter of the variant");
    let mut grid = (n.div_ceil(cfg.bn as usize) as u32, m.div_ceil(cfg.bm as usize) as u32, 1);
    if l.compiled.persistent {
        // One block per SM, each looping over the grid's tiles.
        let sms = device
            .cuda_context()
            .unwrap()
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .unwrap() as u32;
        let blocks = if blocks > 0 { blocks } else { sms };
        grid = ((grid.0 * grid.1).min(blocks), 1, 1);
    }
    let cu_stream: sys::CUstream = stream.cuda_stream().unwrap().cu_stream();
    // SAFETY: the parameters match the kernel's ABI (3 pointers, 3 dims, the
    // divisors, the maps; their number checked above).
    unsafe {
        result::launch_kernel(l.func, grid, (l.compiled.threads, 1, 1), l.compiled.shared_bytes, cu_stream, &mut params)
    }
    .unwrap();
    Ok(())
}

fn hopper_gpu() -> Option<(Device, Stream)> {
    let device = Device::cuda(0).expect("these tests need a GPU");
    if device.compute_capability().unwrap().0 != 9 {
        eprintln!("skipping: sm_90a code needs compute capability 9.x, this GPU is {:?}", device.compute_capability());
        return None;
    }
    let stream = device.stream().unwrap();
    Some((device, stream))
}

fn to_host<T: Element>(v: &[f32]) -> Vec<T> {
    v.iter().map(|x| T::from_f64(*x as f64)).collect()
}

/// Runs one configuration at one shape; checks sampled rows against f64.
fn check<T: Element>(device: &Device, stream: &Stream, cfg: Matmul, shape: (usize, usize, usize)) -> Vec<T> {
    check_blocks(device, stream, cfg, 0, shape)
}

/// [`check`], a persistent variant launched with `blocks` blocks (0: one per SM).
fn check_blocks<T: Element>(
    device: &Device,
    stream: &Stream,
    cfg: Matmul,
    blocks: u32,
    (m, n, k): (usize, usize, usize),
) -> Vec<T> {
    let l = load(device, ws_variant(cfg));
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (m * 31 + n * 7 + k) as u64);
    let a_shape = if cfg.trans_a { [k, m] } else { [m, k] };
    let b_shape = if cfg.trans_b { [n, k] } else { [k, n] };
    let a32: Vec<f32> = (0..m * k).map(|_| rng.f32(-1.0, 1.0)).collect();
    let b32: Vec<f32> = (0..k * n).map(|_| rng.f32(-1.0, 1.0)).collect();
    let (ah, bh): (Vec<T>, Vec<T>) = (to_host(&a32), to_host(&b32));
    let a = DeviceTensor::from_slice(stream, &ah, &a_shape).unwrap();
    let b = DeviceTensor::from_slice(stream, &bh, &b_shape).unwrap();
    let mut c = DeviceTensor::<T>::from_slice(stream, &vec![T::from_f64(7.0); m * n], &[m, n]).unwrap();
    launch(device, stream, &l, cfg, blocks, (m, n, k), &a, &b, &mut c).unwrap();
    stream.synchronize().unwrap();
    let got = c.to_vec(stream).unwrap();
    let av = |r: usize, kk: usize| {
        if cfg.trans_a {
            ah[kk * m + r].to_f64()
        } else {
            ah[r * k + kk].to_f64()
        }
    };
    let bv = |kk: usize, col: usize| {
        if cfg.trans_b {
            bh[col * k + kk].to_f64()
        } else {
            bh[kk * n + col].to_f64()
        }
    };
    let rows: Vec<usize> = (0..m).filter(|r| r % 37 == 0 || *r + 1 == m || r % 128 == 127 || r % 128 == 64).collect();
    for &r in &rows {
        for col in 0..n {
            let want: f64 = (0..k).map(|kk| av(r, kk) * bv(kk, col)).sum();
            let g = got[r * n + col].to_f64();
            let tol = if cfg.dtype == "bf16" { 2e-2 } else { 4e-3 } * (1.0 + want.abs()) + 1e-3 * (k as f64).sqrt();
            assert!((g - want).abs() <= tol, "{cfg:?} {m}x{n}x{k}: c[{r}][{col}] = {g}, want {want}");
        }
    }
    got
}

#[test]
fn warp_specialized_gemm_matches_the_reference() {
    let Some((device, stream)) = hopper_gpu() else {
        return;
    };
    if std::env::var("TILE_TEST_SMALL").is_ok() {
        // Under compute-sanitizer: a few small cases through every code path
        // (edges, transposes, persistent tile loops, the TMA store).
        check_blocks::<f16>(&device, &stream, BASE, 2, (200, 520, 136));
        check::<bf16>(&device, &stream, Matmul { dtype: "bf16", trans_a: true, trans_b: true, ..BASE }, (136, 264, 72));
        check::<f16>(&device, &stream, Matmul { bm: 64, bn: 128, threads: 128, stages: 2, ..BASE }, (100, 136, 200));
        check_blocks::<f16>(&device, &stream, Matmul { bm: 128, bn: 128, threads: 128, ..BASE }, 2, (200, 264, 136));
        return;
    }
    let shapes =
        [(1000, 1000, 1000), (1999, 1000, 4096), (4095, 1016, 1032), (128, 256, 64), (127, 264, 8), (256, 512, 4096)];
    for &shape in &shapes {
        check::<f16>(&device, &stream, BASE, shape);
        check::<bf16>(&device, &stream, Matmul { dtype: "bf16", ..BASE }, shape);
    }
    // Transposed operands are read through maps of `[K, M]` / `[N, K]`
    // tensors: every extent a multiple of 8 keeps their rows 16-byte multiples.
    for (ta, tb) in [(false, true), (true, false), (true, true)] {
        for shape in [(1000, 1000, 1000), (2040, 1016, 1032), (136, 264, 72)] {
            check::<f16>(&device, &stream, Matmul { trans_a: ta, trans_b: tb, ..BASE }, shape);
        }
    }
    // Two 64-row slices per warpgroup (one warpgroup on 128 rows; two on 256).
    check::<f16>(&device, &stream, Matmul { bm: 128, bn: 128, threads: 128, ..BASE }, (1000, 1000, 1000));
    check::<bf16>(
        &device,
        &stream,
        Matmul { dtype: "bf16", bm: 256, bn: 128, threads: 256, stages: 4, trans_b: true, ..BASE },
        (1000, 1016, 1032),
    );
    check_blocks::<f16>(
        &device,
        &stream,
        Matmul { bm: 128, bn: 64, threads: 128, trans_a: true, ..BASE },
        7,
        (1016, 200, 136),
    );
    // A persistent launch with few blocks: each loops over many tiles.
    check_blocks::<f16>(&device, &stream, BASE, 5, (1999, 1000, 1032));
    check_blocks::<bf16>(&device, &stream, Matmul { dtype: "bf16", stages: 2, ..BASE }, 3, (1000, 2040, 136));
    // One consumer warpgroup, 128×128 tiles; 64-deep K-major tiles of 32 columns (64B swizzle).
    check::<f16>(&device, &stream, Matmul { bm: 64, bn: 128, threads: 128, ..BASE }, (1000, 1000, 1000));
    check::<f16>(&device, &stream, Matmul { bk: 32, ..BASE }, (1000, 1000, 1000));
    check::<bf16>(
        &device,
        &stream,
        Matmul { dtype: "bf16", bn: 128, bk: 32, trans_b: true, ..BASE },
        (1000, 1000, 1000),
    );
}

#[test]
fn results_do_not_depend_on_the_number_of_stages() {
    let Some((device, stream)) = hopper_gpu() else {
        return;
    };
    if std::env::var("TILE_TEST_SMALL").is_ok() {
        return;
    }
    let shape = (1000, 1016, 2000);
    let base = check::<f16>(&device, &stream, Matmul { stages: 2, ..BASE }, shape);
    for stages in [3, 4] {
        let other = check::<f16>(&device, &stream, Matmul { stages, ..BASE }, shape);
        assert!(base.iter().zip(&other).all(|(x, y)| x.to_bits() == y.to_bits()), "stages {stages} differ from 2");
    }
}

/// `TILE_WS_BENCH=1`: the variant against cuBLAS (RESULT lines).
#[test]
fn bench_against_cublas() {
    if std::env::var("TILE_WS_BENCH").is_err() {
        return;
    }
    let Some((device, stream)) = hopper_gpu() else {
        return;
    };
    let blas = tile_runtime::cublas::Gemm::new(&stream).unwrap();
    let stages: u32 = std::env::var("TILE_WS_STAGES").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for size in [4096usize, 8192] {
        for (bf, persistent) in [(false, true), (true, true), (false, false), (true, false)] {
            let cfg = Matmul { dtype: if bf { "bf16" } else { "f16" }, stages, ..BASE };
            let l = load(&device, ws_variant_with(cfg, CompileOptions { persistent, ..CompileOptions::default() }));
            assert_eq!(l.compiled.persistent, persistent);
            let flops = 2.0 * (size as f64).powi(3);
            let (ours, theirs) = if bf {
                run_pair::<bf16>(&device, &stream, &blas, &l, cfg, size)
            } else {
                run_pair::<f16>(&device, &stream, &blas, &l, cfg, size)
            };
            println!(
                "RESULT ws_gemm dtype={} size={size} stages={stages} persistent={persistent} ours_tflops={:.1} cublas_tflops={:.1} ratio={:.3}",
                if bf { "bf16" } else { "f16" },
                ours.tflops(flops),
                theirs.tflops(flops),
                ours.tflops(flops) / theirs.tflops(flops)
            );
        }
    }
}

/// `TILE_WS_BENCH=1`: tile shapes of the warp-specialized variant (one or
/// two 64-row slices per consumer warpgroup), f16, against cuBLAS.
#[test]
fn bench_tile_shapes() {
    if std::env::var("TILE_WS_BENCH").is_err() {
        return;
    }
    let Some((device, stream)) = hopper_gpu() else {
        return;
    };
    let blas = tile_runtime::cublas::Gemm::new(&stream).unwrap();
    let shapes = [
        Matmul { bm: 128, bn: 128, threads: 128, stages: 4, ..BASE },
        Matmul { bm: 256, bn: 128, threads: 256, stages: 3, ..BASE },
        Matmul { bm: 128, bn: 128, threads: 256, stages: 4, ..BASE },
    ];
    for size in [4096usize, 8192] {
        for cfg in shapes {
            let l = load(&device, ws_variant(cfg));
            let (ours, theirs) = run_pair::<f16>(&device, &stream, &blas, &l, cfg, size);
            let flops = 2.0 * (size as f64).powi(3);
            println!(
                "RESULT ws_tiles dtype=f16 size={size} tile={}x{}x{} threads={} stages={} persistent={} ours_tflops={:.1} cublas_tflops={:.1} ratio={:.3}",
                cfg.bm, cfg.bn, cfg.bk, cfg.threads, cfg.stages, l.compiled.persistent,
                ours.tflops(flops),
                theirs.tflops(flops),
                ours.tflops(flops) / theirs.tflops(flops)
            );
        }
    }
}

/// `TILE_WS_BENCH=1`: the variants that are not warp-specialized (the
/// general lowering with TMA pipelined copies, and with cp.async) of the
/// same kernel against cuBLAS, f16 (RESULT lines).
#[test]
fn bench_general_variants() {
    if std::env::var("TILE_WS_BENCH").is_err() {
        return;
    }
    let Some((device, stream)) = hopper_gpu() else {
        return;
    };
    let blas = tile_runtime::cublas::Gemm::new(&stream).unwrap();
    let k = parse_kernel(&BASE.text()).unwrap();
    for size in [4096usize, 8192] {
        for tma_copies in [true, false] {
            let c =
                tile_ir::compile_with(&k, Target::Sm90a, CompileOptions { tma_copies, ..CompileOptions::default() })
                    .unwrap();
            assert_eq!(c.tensor_maps.is_empty(), !tma_copies);
            let l = load(&device, c);
            let (ours, theirs) = run_pair::<f16>(&device, &stream, &blas, &l, BASE, size);
            let flops = 2.0 * (size as f64).powi(3);
            println!(
                "RESULT general_gemm dtype=f16 size={size} copies={} ours_tflops={:.1} cublas_tflops={:.1} ratio={:.3}",
                if tma_copies { "tma" } else { "cp.async" },
                ours.tflops(flops),
                theirs.tflops(flops),
                ours.tflops(flops) / theirs.tflops(flops)
            );
        }
    }
}

fn run_pair<T: Element + tile_runtime::cublas::CublasElement>(
    device: &Device,
    stream: &Stream,
    blas: &tile_runtime::cublas::Gemm,
    l: &Loaded,
    cfg: Matmul,
    size: usize,
) -> (tile_runtime::BenchResult, tile_runtime::BenchResult) {
    let mut rng = Rng(5);
    let host: Vec<T> = (0..size * size).map(|_| T::from_f64(rng.f32(-1.0, 1.0) as f64)).collect();
    let a = DeviceTensor::from_slice(stream, &host, &[size, size]).unwrap();
    let b = DeviceTensor::from_slice(stream, &host, &[size, size]).unwrap();
    let mut c = DeviceTensor::<T>::zeros(stream, &[size, size]).unwrap();
    let mut c2 = DeviceTensor::<T>::zeros(stream, &[size, size]).unwrap();
    let ours = bench(stream, 5, 20, || launch(device, stream, l, cfg, 0, (size, size, size), &a, &b, &mut c)).unwrap();
    let theirs = bench(stream, 5, 20, || blas.gemm(size, size, size, &a, &b, &mut c2, false, false)).unwrap();
    let x = c.to_vec(stream).unwrap();
    let y = c2.to_vec(stream).unwrap();
    let err = tile_runtime::rel_error(
        &x.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
        &y.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
    );
    assert!(err < 1e-2, "ours and cuBLAS differ by {err}");
    (ours, theirs)
}

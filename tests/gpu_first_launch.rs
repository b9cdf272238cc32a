//! The first launch of a kernel in a fresh process, with the embedded cubin
//! and with the JIT (`TILE_NO_CUBIN=1`), for the vector add and the example
//! GEMM (feature `gpu`). Each measurement runs in a child process (this test
//! binary again, one test selected) so that nothing is loaded yet; the child
//! prints one `RESULT first_launch ...` line.
//!
//! `TILE_PTXAS=<ptxas> cargo test --release --features gpu --test gpu_first_launch -- --nocapture`
//! (without `TILE_PTXAS` at build time there is no cubin: the test says so
//! and checks the JIT path only).
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "../examples/kernels"]
mod examples {
    pub mod gemm;
    pub mod vector_add;
}
use std::time::Instant;
use tile::prelude::*;
use tile::ModuleSource;

/// Set in the child processes: which kernel to launch.
const CHILD: &str = "TILE_FIRST_LAUNCH_CHILD";

fn built_with_ptxas() -> bool {
    option_env!("TILE_PTXAS").is_some_and(|p| !p.trim().is_empty())
}

/// The child: creates the device, stream and inputs, then times the first
/// launch (load and launch, up to the end of the kernel) and checks the
/// result and what the module was loaded from.
#[test]
fn first_launch_child() {
    let Ok(which) = std::env::var(CHILD) else { return };
    let device = Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver");
    let stream = device.stream().unwrap();
    let mut rng = common::Rng::new(5);
    let forced_jit = std::env::var("TILE_NO_CUBIN").is_ok_and(|v| v == "1");
    let (ms, meta, err) = match which.as_str() {
        "vector_add" => {
            let n = 100_003;
            let (a_host, b_host) = (rng.vec(n, -1.0, 1.0), rng.vec(n, -1.0, 1.0));
            let a = DeviceTensor::from_slice(&stream, &a_host, &[n]).unwrap();
            let b = DeviceTensor::from_slice(&stream, &b_host, &[n]).unwrap();
            let mut c = DeviceTensor::<f32>::zeros(&stream, &[n]).unwrap();
            stream.synchronize().unwrap();
            let start = Instant::now();
            examples::vector_add::vector_add::launch(&stream, &a, &b, &mut c).unwrap();
            stream.synchronize().unwrap();
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let err =
                assert_close(&c.to_vec(&stream).unwrap(), &examples::vector_add::reference(&a_host, &b_host), 1e-6);
            (ms, &examples::vector_add::vector_add::META, err.unwrap())
        }
        "gemm" => {
            let (m, n, k) = (300, 260, 130);
            let to = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
            let (a_host, b_host) = (to(rng.vec(m * k, -1.0, 1.0)), to(rng.vec(k * n, -1.0, 1.0)));
            let a = DeviceTensor::from_slice(&stream, &a_host, &[m, k]).unwrap();
            let b = DeviceTensor::from_slice(&stream, &b_host, &[k, n]).unwrap();
            let mut c = DeviceTensor::<f16>::zeros(&stream, &[m, n]).unwrap();
            stream.synchronize().unwrap();
            let start = Instant::now();
            examples::gemm::example(&stream, &a, &b, &mut c).unwrap();
            stream.synchronize().unwrap();
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let reference = examples::gemm::reference(m, n, k, &a_host, &b_host, false);
            let err = assert_close(&c.to_vec(&stream).unwrap(), &reference, 2e-3);
            let meta = examples::gemm::matmul::meta::<f16, f16, 128, 256, 64, 3, 256, 8>();
            (ms, meta, err.unwrap())
        }
        other => panic!("{CHILD}={other}: expected vector_add or gemm"),
    };
    let sources: Vec<ModuleSource> = device.module_sources(meta).into_iter().flatten().collect();
    assert_eq!(sources.len(), 1, "{}: one variant loaded, got {sources:?}", meta.name);
    let source = sources[0];
    let expected = if built_with_ptxas() && !forced_jit { ModuleSource::Cubin } else { ModuleSource::Ptx };
    assert_eq!(source, expected, "{}: loaded from {source:?}", meta.name);
    let name = if source == ModuleSource::Cubin { "cubin" } else { "jit" };
    println!(
        "RESULT first_launch kernel={which} source={name} ms={ms:.3} rel_err={err:.2e} device=\"{}\"",
        device.name()
    );
}

/// Runs the child for `kernel`, with or without the cubin; its first-launch
/// time in ms.
fn run_child(kernel: &str, jit: bool) -> f64 {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", "first_launch_child", "--nocapture", "--test-threads=1"]).env(CHILD, kernel);
    // The driver caches JIT output on disk (~/.nv/ComputeCache): without
    // this, every run after the first would time a cache hit, not the JIT.
    cmd.env("CUDA_CACHE_DISABLE", "1");
    if jit {
        cmd.env("TILE_NO_CUBIN", "1");
    } else {
        cmd.env_remove("TILE_NO_CUBIN");
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child {kernel} (jit = {jit}) failed:\n{text}");
    // The test harness prints `test first_launch_child ... ` before the
    // child's own output on the same line: find the result within a line.
    let line = text
        .lines()
        .find_map(|l| l.find("RESULT first_launch").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no RESULT line from child {kernel} (jit = {jit}):\n{text}"));
    println!("{line}");
    let ms = line.split_whitespace().find_map(|w| w.strip_prefix("ms=")).unwrap();
    ms.parse().unwrap()
}

#[test]
fn first_launch_with_the_cubin_skips_the_jit() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    for kernel in ["vector_add", "gemm"] {
        let jit = run_child(kernel, true);
        if !built_with_ptxas() {
            println!("built without TILE_PTXAS: no cubin embedded, {kernel}'s first launch JIT-compiles ({jit:.1} ms)");
            continue;
        }
        let cubin = run_child(kernel, false);
        println!("RESULT first_launch_ratio kernel={kernel} jit_ms={jit:.3} cubin_ms={cubin:.3}");
        assert!(cubin < 10.0, "{kernel}: the first launch from the cubin took {cubin:.1} ms (the JIT: {jit:.1} ms)");
    }
}

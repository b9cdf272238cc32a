//! A fused RMSNorm as a candle `CustomOp2` whose CUDA forward pass is a tile
//! kernel (`examples/kernels/rmsnorm.rs`), run on candle's tensors and stream
//! with no copy, checked against the same norm written with candle's own ops,
//! and timed against it.
//!
//! `cargo run --release --no-default-features --features candle --example candle_rmsnorm`
//! (candle's CUDA backend needs `nvcc` and CUDA's libraries to build, a GPU
//! to run). Without a CUDA toolkit: `scripts/dist.sh candle` builds it from
//! NVIDIA's wheels into `dist/`, and `dist/run.sh candle` runs it on the GPU
//! machine. Prints one `RESULT candle_rmsnorm` line per shape (the error
//! against candle's ops; the times for the large one) and
//! `RESULT candle_rmsnorm_check ok` once every shape matched and the glue
//! refused what it must; any mismatch ends the program with an error.
use candle_core::cuda::CudaStorage;
use candle_core::{CpuStorage, CustomOp2, DType, Device, Layout, Shape, Tensor, D};
use tile::TensorViewMut;

#[path = "kernels/rmsnorm.rs"]
mod kernels;

/// `x.apply_op2(&w, RmsNorm { eps })`: x `[M, N]` f32, w `[N]` f32.
struct RmsNorm {
    eps: f32,
}

impl RmsNorm {
    fn run(&self, x: &CudaStorage, xl: &Layout, w: &CudaStorage, wl: &Layout) -> tile::Result<(CudaStorage, Shape)> {
        let &[m, n] = xl.shape().dims() else {
            return Err(tile::Error::Usage(format!("RmsNorm takes a 2-D x, got shape {:?}", xl.shape().dims())));
        };
        if wl.shape().dims() != [n] {
            return Err(tile::Error::Usage(format!("RmsNorm: w has shape {:?}, x has {n} columns", wl.shape().dims())));
        }
        // candle's stream: the kernel runs in order with candle's own work.
        let stream = tile::candle::stream(x)?;
        let xv = tile::candle::view::<f32>(x, xl)?;
        let wv = tile::candle::view::<f32>(w, wl)?;
        let mut out = tile::candle::output::<f32>(x, m * n)?;
        {
            let mut yv = TensorViewMut::new(&mut out, &[m, n])?;
            kernels::rmsnorm::launch(&stream, &xv, &wv, &mut yv, self.eps)?;
        }
        Ok((tile::candle::into_storage(out, x), xl.shape().clone()))
    }
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "tile-rmsnorm"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("the tile RmsNorm runs on CUDA tensors")
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        self.run(x, xl, w, wl).map_err(candle_core::Error::wrap)
    }
}

/// The same norm with candle's ops.
fn candle_rmsnorm(x: &Tensor, w: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(ms + eps as f64)?.sqrt()?)?.broadcast_mul(w)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::new_cuda(0)?;
    let eps = 1e-6f32;
    let mut worst = 0f32;
    let shapes = [(1, 1), (7, 1000), (33, 4096), (4096, 4096), (5, 10_001)];
    for (m, n) in shapes {
        let x = Tensor::randn(0f32, 1.0, (m, n), &device)?;
        let w = Tensor::rand(0.5f32, 1.5, n, &device)?;
        let ours = x.apply_op2(&w, RmsNorm { eps })?;
        let theirs = candle_rmsnorm(&x, &w, eps)?;
        let diff = (&ours - &theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
        let scale = theirs.abs()?.max_all()?.to_scalar::<f32>()?.max(1e-30);
        let rel = diff / scale;
        println!("{m} x {n}: max |tile - candle| = {diff:.3e} (relative {rel:.3e})");
        if rel.is_nan() || rel > 1e-5 {
            return Err(format!("{m} x {n}: the tile RMSNorm differs from candle's by {rel:.3e}").into());
        }
        worst = worst.max(rel);
        if m * n >= 1 << 24 {
            let time = |f: &dyn Fn() -> candle_core::Result<Tensor>| -> candle_core::Result<f64> {
                for _ in 0..5 {
                    f()?;
                }
                device.synchronize()?;
                let start = std::time::Instant::now();
                for _ in 0..50 {
                    f()?;
                }
                device.synchronize()?;
                Ok(start.elapsed().as_secs_f64() * 1e3 / 50.0)
            };
            let t_ours = time(&|| x.apply_op2(&w, RmsNorm { eps }))?;
            let t_candle = time(&|| candle_rmsnorm(&x, &w, eps))?;
            println!(
                "RESULT candle_rmsnorm m={m} n={n} rel_err={rel:.2e} tile_ms={t_ours:.4} candle_ops_ms={t_candle:.4}"
            );
        } else {
            println!("RESULT candle_rmsnorm m={m} n={n} rel_err={rel:.2e}");
        }
    }
    // What the glue refuses, each with a tile::Error that says which.
    let x = Tensor::randn(0f32, 1.0, (64, 32), &device)?;
    let w = Tensor::ones(64, DType::F32, &device)?;
    let e = x.t()?.apply_op2(&w, RmsNorm { eps }).unwrap_err();
    println!("a transposed x: {e}");
    assert!(e.to_string().contains("not contiguous"), "{e}");
    let e = x.to_dtype(DType::F16)?.apply_op2(&w.narrow(0, 0, 32)?.to_dtype(DType::F16)?, RmsNorm { eps }).unwrap_err();
    println!("an f16 x: {e}");
    assert!(e.to_string().contains("the kernel takes f32"), "{e}");
    println!(
        "RESULT candle_rmsnorm_check ok shapes={} max_rel_err={worst:.2e} (against candle's ops, on candle's stream)",
        shapes.len()
    );
    Ok(())
}

//! Helpers shared by the runtime's integration tests: hand-built kernels
//! (as `generated code` would embed them), a small deterministic RNG, and
//! the GPU tests' device and leaked-string helpers.
#![allow(dead_code)]

use tile_ir::{BinOp, DType, Expr, Extent, Kernel, LoopKind, Stmt, StmtKind, VarKind};
use tile_runtime::{Device, KernelMeta, KernelTarget, Stream};

/// The first CUDA device and a stream on it (the GPU tests).
pub fn gpu() -> (Device, Stream) {
    let device = Device::cuda(0).expect("these tests need a GPU");
    let stream = device.stream().unwrap();
    (device, stream)
}

/// Leaks `s`, for the `&'static str` fields of a hand-built `KernelMeta`.
pub fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Leaks a `KernelMeta` for `kernel` with the given targets, as the macro's `static META` would be.
pub fn leak_meta(kernel: &Kernel, targets: Vec<KernelTarget>) -> &'static KernelMeta {
    let ir: &'static str = Box::leak(serde_json::to_string(kernel).unwrap().into_boxed_str());
    let name: &'static str = Box::leak(kernel.name.clone().into_boxed_str());
    Box::leak(Box::new(KernelMeta { name, ir, targets: Box::leak(targets.into_boxed_slice()) }))
}

/// `scale(a: &Tensor<f32, [N]>, c: &mut Tensor<f32, [N]>, s: f32)`:
/// `c[i] = a[i] * s`, 128 elements per block, grid `cdiv(N, 128)`.
pub fn scale_kernel() -> Kernel {
    let mut k = Kernel::new("scale", 128);
    let n = k.add_dim("N");
    let a = k.add_tensor_param("a", DType::F32, vec![Extent::Dyn(n)], false);
    let c = k.add_tensor_param("c", DType::F32, vec![Extent::Dyn(n)], true);
    let s = k.add_scalar_param("s", DType::F32);
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    k.grid = [Expr::cdiv(Expr::var(n), Expr::i32(128)), Expr::i32(1), Expr::i32(1)];
    let idx = Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, Expr::var(bx), Expr::i32(128)), Expr::var(i));
    let value = Expr::binary(BinOp::Mul, Expr::load(a, vec![idx.clone()]), Expr::var(s));
    k.body = vec![Stmt::new(StmtKind::For {
        var: i,
        start: Expr::i32(0),
        end: Expr::i32(128),
        kind: LoopKind::Parallel,
        body: vec![Stmt::new(StmtKind::Store { buf: c, index: vec![idx], value })],
    })];
    k
}

/// `affine(x: &Tensor<f16, [M, N]>, y: &mut Tensor<f32, [M, N]>, alpha: f16, beta: u32)`:
/// `y = x * alpha + beta` over all `M * N` elements, 256 per block,
/// grid `cdiv(M * N, 256)`. Two dynamic dims and 16-bit scalars exercise the launch ABI.
pub fn affine_kernel() -> Kernel {
    let mut k = Kernel::new("affine", 256);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], false);
    let y = k.add_tensor_param("y", DType::F32, vec![Extent::Dyn(m), Extent::Dyn(n)], true);
    let alpha = k.add_scalar_param("alpha", DType::F16);
    let beta = k.add_scalar_param("beta", DType::U32);
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let mn = Expr::binary(BinOp::Mul, Expr::var(m), Expr::var(n));
    k.grid = [Expr::cdiv(mn, Expr::i32(256)), Expr::i32(1), Expr::i32(1)];
    let flat = Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, Expr::var(bx), Expr::i32(256)), Expr::var(i));
    let row = Expr::binary(BinOp::Div, flat.clone(), Expr::var(n));
    let col = Expr::binary(BinOp::Rem, flat.clone(), Expr::var(n));
    let in_range = Expr::binary(BinOp::Lt, flat, Expr::binary(BinOp::Mul, Expr::var(m), Expr::var(n)));
    let value = Expr::binary(
        BinOp::Add,
        Expr::cast(
            DType::F32,
            Expr::binary(BinOp::Mul, Expr::load(x, vec![row.clone(), col.clone()]), Expr::var(alpha)),
        ),
        Expr::cast(DType::F32, Expr::var(beta)),
    );
    k.body = vec![Stmt::new(StmtKind::For {
        var: i,
        start: Expr::i32(0),
        end: Expr::i32(256),
        kind: LoopKind::Parallel,
        body: vec![Stmt::new(StmtKind::If {
            cond: in_range,
            then: vec![Stmt::new(StmtKind::Store { buf: y, index: vec![row, col], value })],
            otherwise: vec![],
        })],
    })];
    k
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

//! Kernels and metadata that the launch path's unit tests share.

use tile_ir::{DType, Extent, Kernel};

use super::meta::{KernelMeta, KernelTarget, TensorMapMeta};

pub(super) const MAPS_A_C: &[TensorMapMeta] = &[
    TensorMapMeta { tensor: 0, box_shape: &[64, 64], swizzle_bytes: 128 },
    TensorMapMeta { tensor: 2, box_shape: &[64, 32], swizzle_bytes: 64 },
];

pub(super) fn target(arch: &'static str, threads: u32, tensor_maps: &'static [TensorMapMeta]) -> KernelTarget {
    let schedule = if tensor_maps.is_empty() { "general" } else { "warp_specialized_gemm" };
    KernelTarget { arch, schedule, ptx: "", shared_bytes: 0, threads, tensor_maps, persistent: false, cubin: None }
}

pub(super) fn leak_meta(targets: Vec<KernelTarget>) -> &'static KernelMeta {
    Box::leak(Box::new(KernelMeta { name: "mm", ir: "", targets: Box::leak(targets.into_boxed_slice()) }))
}

/// `mm(a: &f16[M, K], s: f32, c: &mut f16[M, N])`.
pub(super) fn gemm_like() -> Kernel {
    let mut k = Kernel::new("mm", 256);
    let m = k.add_dim("M");
    let kd = k.add_dim("K");
    let n = k.add_dim("N");
    k.add_tensor_param("a", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(kd)], false);
    k.add_scalar_param("s", DType::F32);
    k.add_tensor_param("c", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], true);
    k
}

//! What `#[tile_kernel]` embeds ([`KernelMeta`], [`KernelTarget`],
//! [`TensorMapMeta`]) and reading it back: the embedded Tile IR is parsed
//! once per `KernelMeta` and checked before anything indexes with it.
//!
//! Expects the statics the macro generates (their field layout is the
//! contract with `tile-macros`; ARCHITECTURE.md, "The generated code").
//! Guarantees: a kernel from [`parsed_kernel`] has a launchable signature
//! (every handle in range, every dynamic extent in `dims`, element types the
//! runtime can pass) and every variant's tensor maps name tensor parameters
//! of the right rank with a swizzle the driver knows; otherwise the launch
//! fails with [`Error::InvalidMeta`] and says to rebuild.

use std::sync::{Arc, OnceLock};

use tile_ir::{DType, Kernel, ParamKind};

use crate::cache::OnceMap;
use crate::error::{Error, Result};
use crate::tensor_map::TmaSwizzle;

/// What `#[tile_kernel]` embeds for one kernel.
#[derive(Debug)]
pub struct KernelMeta {
    /// The kernel's name (the PTX entry point).
    pub name: &'static str,
    /// The kernel's Tile IR, as JSON (`tile_ir::Kernel`).
    pub ir: &'static str,
    /// The PTX for each target the kernel was built for.
    pub targets: &'static [KernelTarget],
}

/// One kernel compiled for one target: one variant. Several entries of
/// [`KernelMeta::targets`] may share an arch; they are then variants,
/// preferred first, and the last of an arch has no tensor maps.
#[derive(Debug)]
pub struct KernelTarget {
    /// `sm_80` or `sm_90a`.
    pub arch: &'static str,
    /// The schedule that made this variant (`tile_ir::Compiled::schedule`:
    /// `warp_specialized_gemm`, `tma_copy`, `cp_async_pipeline` or
    /// `general`), for messages, `TILE_DUMP` and tests that check which
    /// variant ran ([`crate::Device::launch_counts`]).
    pub schedule: &'static str,
    /// The variant's PTX module.
    pub ptx: &'static str,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    /// Threads per block at launch: the kernel's `threads`, or more for a
    /// warp-specialized variant (its producer warpgroup). 1..=1024.
    pub threads: u32,
    /// The TMA tensor maps the variant takes after all its other parameters,
    /// in this order (ARCHITECTURE.md, "Launch ABI"). A variant with maps
    /// runs only when every mapped tensor is TMA-addressable.
    pub tensor_maps: &'static [TensorMapMeta],
    /// A persistent variant (`tile_ir::Compiled::persistent`): its blocks
    /// loop over the grid's blocks, so it is launched with as many blocks
    /// as the SMs hold at once (SMs × the loaded function's occupancy, at
    /// most the grid's block count) as a 1-D grid, unless the kernel asks
    /// for clusters (then with the whole grid: one tile per block).
    pub persistent: bool,
    /// The SASS of `ptx` (an ELF cubin from `ptxas -arch=<arch>`), embedded
    /// when the kernel was built with `TILE_PTXAS`. The runtime loads it
    /// instead of JIT-compiling the PTX on a device that runs it
    /// (`tile_ir::Target::cubin_runs_on`: the sm_80 cubin on 8.x, the sm_90a
    /// one on 9.0), falling back to the PTX when it is absent, when the
    /// device cannot run it, when it fails to load, or under
    /// `TILE_NO_CUBIN=1`.
    pub cubin: Option<&'static [u8]>,
}

/// One TMA tensor map a compiled variant takes (`tile_ir::abi::TensorMapUse`
/// as embedded by `#[tile_kernel]`). At launch the runtime encodes it from
/// the tensor argument: its device address, its shape with dense row-major
/// strides, this box and swizzle, L2 promotion 256 bytes, out-of-bounds
/// elements reading as zero.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapMeta {
    /// Index into the kernel's parameters of the tensor parameter it maps.
    pub tensor: usize,
    /// Box extents in elements, outermost first (the tensor's dim order);
    /// as many as the tensor has dims.
    pub box_shape: &'static [u32],
    /// The box's swizzle span in shared memory, in bytes: 0 (none), 32, 64
    /// or 128.
    pub swizzle_bytes: u32,
}

/// Parsed kernels, by the address of their `&'static KernelMeta`: each
/// parsed and checked once, however many threads launch it first.
pub(crate) fn parsed_kernel(meta: &'static KernelMeta) -> Result<Arc<Kernel>> {
    static KERNELS: OnceLock<OnceMap<usize, Kernel>> = OnceLock::new();
    let key = meta as *const KernelMeta as usize;
    KERNELS.get_or_init(OnceMap::default).get_or_try_init(&key, || {
        let invalid = |message: String| Error::InvalidMeta { kernel: meta.name.to_string(), message };
        let kernel: Kernel =
            serde_json::from_str(meta.ir).map_err(|e| invalid(format!("the IR does not parse: {e}")))?;
        check_signature(&kernel).map_err(invalid)?;
        check_variants(&kernel, meta.targets).map_err(invalid)?;
        Ok(kernel)
    })
}

/// Checks what the launch path relies on (so that `tile_ir::abi` cannot index
/// out of range): handles in range, tensor parameters global with every
/// dynamic extent listed in `dims`, dims `i32`, scalars of a launchable type.
pub(super) fn check_signature(k: &Kernel) -> std::result::Result<(), String> {
    let var_ok = |v: tile_ir::VarId| (v.0 as usize) < k.vars.len();
    for &d in &k.dims {
        if !var_ok(d) {
            return Err(format!("dimension {d} is out of range"));
        }
    }
    for p in &k.params {
        match p.kind {
            ParamKind::Tensor(b) => {
                let Some(buf) = k.buffers.get(b.0 as usize) else {
                    return Err(format!("parameter `{}` names buffer {b}, out of range", p.name));
                };
                if !matches!(buf.dtype, DType::F16 | DType::BF16 | DType::F32 | DType::I32 | DType::U32) {
                    return Err(format!("parameter `{}` has element type {}, not launchable", p.name, buf.dtype));
                }
                for e in &buf.shape {
                    if let tile_ir::Extent::Dyn(v) = e {
                        if !k.dims.contains(v) {
                            return Err(format!("parameter `{}` uses {v}, which is not in `dims`", p.name));
                        }
                    }
                }
            }
            ParamKind::Scalar(v) => {
                if !var_ok(v) {
                    return Err(format!("parameter `{}` names variable {v}, out of range", p.name));
                }
            }
        }
    }
    Ok(())
}

/// Checks every variant's tensor maps: each names a tensor parameter, with
/// a box of that tensor's rank and a swizzle the driver knows; and that its
/// PTX entry takes as many parameters as the launch passes
/// ([`ptx_param_count`] against [`abi_param_count`]), so that a kernel
/// built by another version of the compiler is an error, not parameters
/// read from the wrong slots.
pub(super) fn check_variants(k: &Kernel, targets: &[KernelTarget]) -> std::result::Result<(), String> {
    for t in targets {
        if let Some(n) = ptx_param_count(t.ptx) {
            let expected = abi_param_count(k, t);
            if n != expected {
                return Err(format!(
                    "the {} `{}` variant's PTX takes {n} parameters where the launch passes {expected}: it was \
                     built by another version of tile; rebuild the kernel",
                    t.arch, t.schedule
                ));
            }
        }
        for m in t.tensor_maps {
            let Some(ParamKind::Tensor(b)) = k.params.get(m.tensor).map(|p| &p.kind) else {
                return Err(format!(
                    "a {} tensor map names parameter {}, which is not a tensor parameter",
                    t.arch, m.tensor
                ));
            };
            let rank = k.buffers.get(b.0 as usize).map_or(0, |b| b.shape.len());
            if m.box_shape.len() != rank {
                return Err(format!(
                    "the {} tensor map of `{}` has a {}-D box for a {rank}-D tensor",
                    t.arch,
                    k.params[m.tensor].name,
                    m.box_shape.len()
                ));
            }
            if TmaSwizzle::from_bytes(m.swizzle_bytes).is_none() {
                return Err(format!(
                    "the {} tensor map of `{}` has a {}-byte swizzle (expected 0, 32, 64 or 128)",
                    t.arch, k.params[m.tensor].name, m.swizzle_bytes
                ));
            }
        }
    }
    Ok(())
}

/// The parameters a launch passes to variant `t`: one per tensor and
/// scalar parameter, one per dim, four per divisor
/// (`tile_ir::abi::dims_divisors`), the tile counter where the schedule
/// takes one, the trace buffer in a traced build, one per tensor map.
fn abi_param_count(k: &Kernel, t: &KernelTarget) -> usize {
    k.params.len()
        + k.dims.len()
        + 4 * tile_ir::abi::dims_divisors(k).len()
        + usize::from(tile_ir::abi::takes_tile_counter(t.schedule))
        + usize::from(tile_ir::abi::takes_trace(t.ptx))
        + t.tensor_maps.len()
}

/// The number of parameters of the (first) `.entry` of `ptx`, if it has one.
fn ptx_param_count(ptx: &str) -> Option<usize> {
    let entry = &ptx[ptx.find(".entry")?..];
    let list = &entry[entry.find('(')? + 1..];
    let list = &list[..list.find(')')?];
    Some(list.matches(".param").count())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{gemm_like, target};
    use super::*;
    use tile_ir::Extent;

    #[test]
    fn variant_metadata_is_checked() {
        let k = gemm_like();
        let err = |maps: &'static [TensorMapMeta]| check_variants(&k, &[target("sm_90a", 384, maps)]).unwrap_err();
        let e = err(&[TensorMapMeta { tensor: 1, box_shape: &[8], swizzle_bytes: 0 }]);
        assert!(e.contains("parameter 1") && e.contains("not a tensor"), "{e}");
        let e = err(&[TensorMapMeta { tensor: 7, box_shape: &[8], swizzle_bytes: 0 }]);
        assert!(e.contains("parameter 7"), "{e}");
        let e = err(&[TensorMapMeta { tensor: 0, box_shape: &[1, 64, 64], swizzle_bytes: 0 }]);
        assert!(e.contains("`a`") && e.contains("3-D box for a 2-D tensor"), "{e}");
        let e = err(&[TensorMapMeta { tensor: 2, box_shape: &[64, 64], swizzle_bytes: 96 }]);
        assert!(e.contains("`c`") && e.contains("96-byte swizzle"), "{e}");
    }

    /// A variant whose PTX takes other parameters than the launch passes
    /// (a kernel built by another version of the compiler) is refused.
    #[test]
    fn the_ptx_must_take_the_parameters_the_launch_passes() {
        let k = gemm_like();
        // a, s, c, M, K, N: six.
        let ptx = |n: usize| {
            let params: Vec<String> = (0..n).map(|i| format!("    .param .u32 p{i}")).collect();
            format!(".version 8.0\n.visible .entry mm(\n{}\n)\n{{\n    ret;\n}}\n", params.join(",\n"))
        };
        assert_eq!(ptx_param_count(&ptx(6)), Some(6));
        assert_eq!(ptx_param_count(""), None);
        let with = |n: usize| KernelTarget { ptx: Box::leak(ptx(n).into_boxed_str()), ..target("sm_80", 256, &[]) };
        check_variants(&k, &[with(6)]).unwrap();
        let e = check_variants(&k, &[with(5)]).unwrap_err();
        assert!(e.contains("takes 5 parameters where the launch passes 6") && e.contains("rebuild"), "{e}");
    }

    #[test]
    fn signature_check_rejects_out_of_range_handles() {
        let mut k = Kernel::new("bad", 32);
        k.add_tensor_param("t", DType::F32, vec![Extent::Dyn(tile_ir::VarId(9))], false);
        let err = check_signature(&k).unwrap_err();
        assert!(err.contains("`t`") && err.contains("%9"), "{err}");
        k.params[0].kind = ParamKind::Tensor(tile_ir::BufferId(4));
        assert!(check_signature(&k).unwrap_err().contains("out of range"));
    }
}

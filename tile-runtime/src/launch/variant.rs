//! Which compiled variant runs: the arch for the device's compute
//! capability ([`pick_arch`]), then among that arch's variants, preferred
//! first, the first whose mapped tensors are all TMA-addressable
//! ([`pick_variant`], `tile_ir::abi::tma_addressable`).
//!
//! Expects the variants in `KernelMeta::targets` in preference order, the
//! last of an arch without tensor maps (as `#[tile_kernel]` emits them).
//! Guarantees: the choice depends only on the compute capability and the
//! tensors' addresses, shapes and element types; no arch for the device is
//! [`Error::NoTarget`], and no runnable variant (only when the metadata
//! lacks a general one) is an [`Error::Launch`] naming the tensor. The arch
//! rule is `tile_ir::Target::for_device_among`'s: the runtime matches no
//! arch names itself.
//!
//! `TILE_SKIP_SCHEDULES` (comma-separated schedule names, read once per
//! process) takes variants of those schedules out of the choice, to compare
//! schedules in one build and one GPU run or to bisect a wrong answer; a name
//! that is no schedule, or a skip that leaves the arch no variant, is an
//! [`Error::Launch`] saying so.

use std::sync::OnceLock;

use tile_ir::{DType, Kernel, Schedule, Target};

use super::meta::{KernelMeta, KernelTarget};
use crate::error::{Error, Result};

/// The arch to run on a device of compute capability `cc`: the preferred
/// embedded target that the device runs (`Target::for_device_among`: sm_90a
/// on 9.x, else sm_80 on 8.0 and later, sm_80 also on 9.x without sm_90a).
fn pick_arch(meta: &'static KernelMeta, cc: (u32, u32)) -> Result<&'static str> {
    // Which embedded target a device runs is the compiler's knowledge
    // (`tile_ir::Target`): an arch-specific target (sm_90a) runs only on its
    // own major version, a portable one (sm_80) on every later device.
    let embedded: Vec<Target> = meta.targets.iter().filter_map(|t| Target::from_name(t.arch)).collect();
    let chosen = Target::for_device_among(cc.0, cc.1, &embedded).map(Target::name);
    chosen.ok_or_else(|| Error::NoTarget {
        kernel: meta.name.to_string(),
        device_arch: format!("sm_{}{}", cc.0, cc.1),
        available: meta.targets.iter().map(|t| t.arch.to_string()).collect(),
    })
}

/// The preferred (first) variant of the target for compute capability `cc`.
#[cfg(test)]
fn pick_target(meta: &'static KernelMeta, cc: (u32, u32)) -> Result<&'static KernelTarget> {
    let arch = pick_arch(meta, cc)?;
    Ok(meta.targets.iter().find(|t| t.arch == arch).expect("pick_arch found it"))
}

/// A tensor argument as variant choice and map encoding see it.
#[derive(Copy, Clone, Debug)]
pub(super) struct TensorPlace<'a> {
    /// Device address of element 0 (0 for an empty tensor).
    pub address: u64,
    pub shape: &'a [usize],
    pub dtype: DType,
}

/// The index in `meta.targets` of the variant to launch on a device of
/// compute capability `cc`: among the variants of the chosen arch, in
/// order, the first whose mapped tensors are all TMA-addressable.
/// `tensors[i]` is parameter `i`'s tensor (`None` for scalars).
pub(super) fn pick_variant(
    meta: &'static KernelMeta,
    k: &Kernel,
    cc: (u32, u32),
    tensors: &[Option<TensorPlace<'_>>],
) -> Result<usize> {
    static SKIP: OnceLock<std::result::Result<Vec<Schedule>, String>> = OnceLock::new();
    let skip = SKIP.get_or_init(|| parse_skip(std::env::var("TILE_SKIP_SCHEDULES").ok().as_deref()));
    let skip = skip.as_ref().map_err(|message| Error::Launch { kernel: k.name.clone(), message: message.clone() })?;
    pick_variant_skipping(meta, k, cc, tensors, skip)
}

/// The schedules a `TILE_SKIP_SCHEDULES` value names (none when unset or
/// empty), or what is wrong with it.
fn parse_skip(value: Option<&str>) -> std::result::Result<Vec<Schedule>, String> {
    let names = value.unwrap_or("").split(',').map(str::trim).filter(|n| !n.is_empty());
    names
        .map(|name| {
            Schedule::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Schedule::PREFERENCE.iter().map(|s| s.name()).collect();
                format!(
                    "TILE_SKIP_SCHEDULES names `{name}`, which is not a schedule (the schedules: {})",
                    known.join(", ")
                )
            })
        })
        .collect()
}

/// [`pick_variant`] without the variants of the schedules in `skip`.
fn pick_variant_skipping(
    meta: &'static KernelMeta,
    k: &Kernel,
    cc: (u32, u32),
    tensors: &[Option<TensorPlace<'_>>],
    skip: &[Schedule],
) -> Result<usize> {
    let arch = pick_arch(meta, cc)?;
    let mut refused = Vec::new();
    let skipped = |t: &KernelTarget| Schedule::from_name(t.schedule).is_some_and(|s| skip.contains(&s));
    let candidates = || meta.targets.iter().enumerate().filter(|(_, t)| t.arch == arch);
    if candidates().all(|(_, t)| skipped(t)) {
        let names: Vec<&str> = candidates().map(|(_, t)| t.schedule).collect();
        return Err(Error::Launch {
            kernel: k.name.clone(),
            message: format!(
                "TILE_SKIP_SCHEDULES skips every {arch} variant ({}); leave at least one of them",
                names.join(", ")
            ),
        });
    }
    for (i, t) in candidates().filter(|(_, t)| !skipped(t)) {
        let blocker = t.tensor_maps.iter().find(|m| match tensors.get(m.tensor).copied().flatten() {
            Some(p) => !tile_ir::abi::tma_addressable(p.address, p.shape, p.dtype.size_bytes() as usize),
            None => true,
        });
        match blocker {
            None => return Ok(i),
            Some(m) => refused.push(format!(
                "{} (the `{}` variant)",
                k.params.get(m.tensor).map_or_else(|| format!("parameter {}", m.tensor), |p| format!("`{}`", p.name)),
                t.schedule
            )),
        }
    }
    Err(Error::Launch {
        kernel: k.name.clone(),
        message: format!(
            "every {arch} variant needs TMA-addressable tensors, and {} is not (a 16-byte aligned address and rows \
             of a multiple of 16 bytes); rebuild the kernel with a tile version whose last variant has no tensor maps",
            refused.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{gemm_like, leak_meta, target, MAPS_A_C};
    use super::super::meta::{check_variants, TensorMapMeta};
    use super::*;

    fn meta_with(archs: &[&'static str]) -> &'static KernelMeta {
        let targets: Vec<KernelTarget> = archs
            .iter()
            .map(|&arch| KernelTarget {
                arch,
                schedule: "general",
                ptx: "",
                shared_bytes: 0,
                threads: 32,
                tensor_maps: &[],
                persistent: false,
                cubin: None,
            })
            .collect();
        Box::leak(Box::new(KernelMeta { name: "k", ir: "", targets: Box::leak(targets.into_boxed_slice()) }))
    }

    #[test]
    fn target_choice_follows_the_compute_capability() {
        let both = meta_with(&["sm_80", "sm_90a"]);
        assert_eq!(pick_target(both, (9, 0)).unwrap().arch, "sm_90a");
        assert_eq!(pick_target(both, (8, 9)).unwrap().arch, "sm_80");
        assert_eq!(pick_target(both, (8, 0)).unwrap().arch, "sm_80");
        // sm_90a code runs only on 9.x; later GPUs run the portable PTX.
        assert_eq!(pick_target(both, (10, 0)).unwrap().arch, "sm_80");
        assert_eq!(pick_target(meta_with(&["sm_80"]), (9, 0)).unwrap().arch, "sm_80");
        match pick_target(meta_with(&["sm_90a"]), (8, 6)) {
            Err(Error::NoTarget { kernel, device_arch, available }) => {
                assert_eq!((kernel.as_str(), device_arch.as_str()), ("k", "sm_86"));
                assert_eq!(available, vec!["sm_90a".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        let err = pick_target(both, (7, 5)).unwrap_err();
        assert!(err.to_string().contains("TILE_ARCHS"), "{err}");
    }

    fn place(address: u64, shape: &[usize]) -> Option<TensorPlace<'_>> {
        Some(TensorPlace { address, shape, dtype: DType::F16 })
    }

    #[test]
    fn the_first_variant_whose_tensors_are_tma_addressable_runs() {
        let k = gemm_like();
        // Variants of sm_90a, preferred first; sm_80 in between to check
        // that only the chosen arch's entries count.
        let meta =
            leak_meta(vec![target("sm_90a", 384, MAPS_A_C), target("sm_80", 256, &[]), target("sm_90a", 256, &[])]);
        check_variants(&k, meta.targets).unwrap();
        let (a, c) = ([1000, 2048], [1000, 512]);
        let pick = |pa: u64, sa: &[usize], pc: u64, sc: &[usize], cc| {
            pick_variant(meta, &k, cc, &[place(pa, sa), None, place(pc, sc)]).unwrap()
        };
        assert_eq!(pick(0x10000, &a, 0x20000, &c, (9, 0)), 0);
        // An address off by 8 bytes, on either mapped tensor.
        assert_eq!(pick(0x10008, &a, 0x20000, &c, (9, 0)), 2);
        assert_eq!(pick(0x10000, &a, 0x20008, &c, (9, 0)), 2);
        // Rows of 1001 f16 elements (2002 bytes) are not a multiple of 16 bytes.
        assert_eq!(pick(0x10000, &[1000, 1001], 0x20000, &c, (9, 0)), 2);
        assert_eq!(pick(0x10000, &a, 0x20000, &[3, 1004], (9, 0)), 2);
        // Rows of 1000 f16 (2000 bytes) are; so are rows of 8 (16 bytes).
        assert_eq!(pick(0x10000, &[7, 1000], 0x20000, &[1, 8], (9, 0)), 0);
        // An empty tensor (address 0, a zero extent) is not addressable.
        assert_eq!(pick(0, &[0, 2048], 0x20000, &c, (9, 0)), 2);
        // Other GPUs run sm_80, whatever the tensors.
        assert_eq!(pick(0x10000, &a, 0x20000, &c, (8, 0)), 1);
        assert_eq!(pick(0x10008, &a, 0x20000, &c, (10, 0)), 1);
        // A kernel with a single variant per arch (no warp specialization).
        let single = leak_meta(vec![target("sm_80", 256, &[]), target("sm_90a", 256, &[])]);
        assert_eq!(pick_variant(single, &k, (9, 0), &[place(3, &a), None, place(5, &c)]).unwrap(), 1);
    }

    #[test]
    fn without_a_general_variant_the_error_names_the_tensor() {
        let k = gemm_like();
        let meta = leak_meta(vec![target("sm_90a", 384, MAPS_A_C)]);
        let err =
            pick_variant(meta, &k, (9, 0), &[place(0x10000, &[64, 64]), None, place(0x20004, &[64, 64])]).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::Launch { .. }), "{err:?}");
        assert!(text.contains("`mm`") && text.contains("`c`") && text.contains("TMA-addressable"), "{text}");
        // A map over a scalar parameter never runs (and the meta check rejects it).
        let bad =
            leak_meta(vec![target("sm_90a", 384, &[TensorMapMeta { tensor: 1, box_shape: &[8], swizzle_bytes: 0 }])]);
        assert!(pick_variant(bad, &k, (9, 0), &[place(0x10000, &[64, 64]), None, place(0x20000, &[64, 64])]).is_err());
    }

    #[test]
    fn skipped_schedules_leave_the_choice() {
        let k = gemm_like();
        let meta = leak_meta(vec![target("sm_90a", 384, MAPS_A_C), target("sm_90a", 256, &[])]);
        let tensors = [place(0x10000, &[64, 64]), None, place(0x20000, &[64, 64])];
        let ws = parse_skip(Some(" warp_specialized_gemm ,")).unwrap();
        assert_eq!(ws, vec![Schedule::WarpSpecializedGemm]);
        assert_eq!(pick_variant_skipping(meta, &k, (9, 0), &tensors, &[]).unwrap(), 0);
        assert_eq!(pick_variant_skipping(meta, &k, (9, 0), &tensors, &ws).unwrap(), 1);
        // Skipping every variant of the arch says so, and names them.
        let both = parse_skip(Some("warp_specialized_gemm,general")).unwrap();
        let err = pick_variant_skipping(meta, &k, (9, 0), &tensors, &both).unwrap_err().to_string();
        assert!(err.contains("TILE_SKIP_SCHEDULES") && err.contains("warp_specialized_gemm, general"), "{err}");
        // A name that is no schedule is refused with the list.
        let err = parse_skip(Some("tma_copy,warp_specialised")).unwrap_err();
        assert!(err.contains("`warp_specialised`") && err.contains("cp_async_pipeline"), "{err}");
        assert_eq!(parse_skip(None).unwrap(), vec![]);
        assert_eq!(parse_skip(Some("")).unwrap(), vec![]);
    }
}

//! MLA decode's gemm shapes (`tests/kernels/mla_split.rs`: 64 query rows
//! over 256 threads, both gemms `FullCol`, P through shared memory) in the
//! CPU interpreter at awkward sizes against f64 references: the frontend
//! takes the kernels (the interpreter is schedule-independent; the column
//! split itself is checked on the simulator, `tile-ir/tests/codegen_wgmma_split.rs`,
//! and on the GPU, `tests/gpu_mla_split.rs`).
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/mla_split.rs"]
mod mla_split;
use tile::prelude::*;

#[test]
fn mla_split_attention() {
    let dev = Device::interpreter();
    for (sq, sk) in [(64, 64), (70, 130), (1, 1), (63, 65)] {
        mla_split::check_mla_split(&dev, sq, sk, (sq * 1000 + sk) as u64).unwrap();
    }
}

#[test]
fn gemm_with_split_columns() {
    let dev = Device::interpreter();
    for (m, n, k) in [(64, 512, 32), (70, 520, 50), (1, 3, 1)] {
        mla_split::check_gemm_split_cols(&dev, m, n, k, (m + n + k) as u64).unwrap();
    }
}

/// On sm_90a every variant of both kernels computes its gemms with wgmma
/// split over the two warpgroups (`m64n32`/`m64n64` for the attention's
/// scores and output, `m64n256` for the gemm), never mma.sync.
#[test]
fn sm90a_variants_use_split_wgmma() {
    for (meta, ns) in [
        (&mla_split::mla_split::META, &["m64n32k16", "m64n64k16"][..]),
        (&mla_split::gemm_split_cols::META, &["m64n256k16"][..]),
    ] {
        let variants: Vec<_> = meta.targets.iter().filter(|t| t.arch == "sm_90a").collect();
        assert!(!variants.is_empty(), "{}: no sm_90a variant", meta.name);
        for t in variants {
            for n in ns {
                assert!(
                    t.ptx.contains(&format!("wgmma.mma_async.sync.aligned.{n}")),
                    "{} {}: no {n}",
                    meta.name,
                    t.schedule
                );
            }
            assert!(!t.ptx.contains("mma.sync.aligned.m16n8k16"), "{} {}: mma.sync", meta.name, t.schedule);
        }
    }
}

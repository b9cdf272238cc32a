//! What a device can run, checked before the driver is asked: a variant's
//! block (threads, dynamic shared memory), the loaded function's thread
//! limit (registers), and the grid, each against the limits queried when the
//! device was opened (`DeviceLimits`).
//!
//! Expects the variant that will launch and the grid it launches with (after
//! the persistent variant's reduction to what the SMs hold at once). Guarantees: a
//! request the device cannot run is a message naming the variant, the
//! amount, the device's limit (and the attribute it comes from) and what to
//! change, so the user never sees a bare `CUDA_ERROR_INVALID_VALUE` or
//! `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`. Pure functions of their inputs, so
//! unit tests inject any device's limits.

use super::meta::KernelTarget;
use crate::device::DeviceLimits;

/// Dynamic shared memory a block may use without opting in.
pub(super) const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// Checks `target`'s threads per block and dynamic shared memory against
/// `limits` of the device called `device`.
pub(super) fn check_block(target: &KernelTarget, limits: &DeviceLimits, device: &str) -> Result<(), String> {
    let variant = format!("its {} `{}` variant", target.arch, target.schedule);
    if target.threads == 0 || target.threads > limits.max_threads_per_block {
        return Err(format!(
            "{variant} has {} threads per block, but {device} runs 1 to {} \
             (CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK); lower `threads = ..` in #[tile_kernel] (a \
             warp-specialized variant adds a producer warpgroup of 128 threads to it)",
            target.threads, limits.max_threads_per_block
        ));
    }
    let shared_limit = limits.max_shared_optin.max(DEFAULT_SHARED_LIMIT);
    if target.shared_bytes > shared_limit {
        return Err(format!(
            "{variant} needs {} bytes of dynamic shared memory per block, but {device} allows at most {shared_limit} \
             (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN); use smaller shared tiles or fewer stages in \
             `pipelined(n, stages)`, or embed only targets this GPU can run it on (`archs = ..`)",
            target.shared_bytes
        ));
    }
    Ok(())
}

/// Checks `target`'s threads per block against what its loaded function
/// allows (`max_threads`, fewer than the device's limit when each thread
/// uses many of the SM's registers: `registers` per thread).
pub(super) fn check_function(target: &KernelTarget, max_threads: u32, registers: u32) -> Result<(), String> {
    if target.threads > max_threads {
        return Err(format!(
            "its {} `{}` variant uses {registers} registers per thread, so a block of it can have at most {max_threads} \
             threads (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), but it launches {}; lower `threads = ..` in \
             #[tile_kernel] or make the kernel keep fewer values per thread (smaller tiles per thread)",
            target.arch, target.schedule, target.threads
        ));
    }
    Ok(())
}

/// Checks the grid launched (`grid`, blocks per axis x, y, z) against the
/// device's largest grid.
pub(super) fn check_grid(grid: [u32; 3], limits: &DeviceLimits, device: &str) -> Result<(), String> {
    let axes = ["x", "y", "z"];
    let over: Vec<String> = (0..3)
        .filter(|&a| grid[a] > limits.max_grid[a])
        .map(|a| {
            format!(
                "{} = {} exceeds {device}'s limit of {} (CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{})",
                axes[a],
                grid[a],
                limits.max_grid[a],
                axes[a].to_uppercase()
            )
        })
        .collect();
    if over.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the grid {grid:?} is larger than the device can launch: {}; give each block more work (larger tiles) \
         or split the work over several launches",
        over.join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H200's limits, with a smaller shared-memory opt-in to vary.
    fn limits(max_shared_optin: u32) -> DeviceLimits {
        DeviceLimits {
            max_threads_per_block: 1024,
            max_grid: [i32::MAX as u32, 65535, 65535],
            max_shared_optin,
            total_memory: 141 << 30,
        }
    }

    fn target(threads: u32, shared_bytes: u32) -> KernelTarget {
        KernelTarget {
            arch: "sm_90a",
            schedule: "cp_async_pipeline",
            ptx: "",
            shared_bytes,
            threads,
            tensor_maps: &[],
            persistent: false,
            cubin: None,
        }
    }

    #[test]
    fn a_block_past_the_devices_limits_names_the_variant_and_the_limit() {
        let h200 = limits(232_448);
        assert_eq!(check_block(&target(256, 232_448), &h200, "NVIDIA H200"), Ok(()));
        assert_eq!(check_block(&target(1024, 0), &h200, "NVIDIA H200"), Ok(()));
        let e = check_block(&target(256, 232_449), &h200, "NVIDIA H200").unwrap_err();
        assert!(e.starts_with("its sm_90a `cp_async_pipeline` variant needs 232449 bytes"), "{e}");
        assert!(e.contains("NVIDIA H200 allows at most 232448") && e.contains("OPTIN") && e.contains("stages"), "{e}");
        // A device whose opt-in is lower than the default still runs 48 KiB.
        let small = limits(0);
        assert_eq!(check_block(&target(128, 48 * 1024), &small, "old"), Ok(()));
        let e = check_block(&target(128, 48 * 1024 + 16), &small, "old").unwrap_err();
        assert!(e.contains("old allows at most 49152"), "{e}");
        for threads in [0, 1025, 2048] {
            let e = check_block(&target(threads, 0), &h200, "NVIDIA H200").unwrap_err();
            assert!(e.contains(&format!("has {threads} threads per block, but NVIDIA H200 runs 1 to 1024")), "{e}");
            assert!(e.contains("MAX_THREADS_PER_BLOCK") && e.contains("threads = .."), "{e}");
        }
        let mut tiny = limits(0);
        tiny.max_threads_per_block = 512;
        let e = check_block(&target(768, 0), &tiny, "a small GPU").unwrap_err();
        assert!(e.contains("has 768 threads per block, but a small GPU runs 1 to 512"), "{e}");
    }

    #[test]
    fn a_function_with_too_many_registers_for_its_block_is_refused() {
        assert_eq!(check_function(&target(256, 0), 256, 255), Ok(()));
        let e = check_function(&target(512, 0), 384, 168).unwrap_err();
        assert!(e.contains("uses 168 registers per thread, so a block of it can have at most 384 threads"), "{e}");
        assert!(e.contains("but it launches 512"), "{e}");
    }

    #[test]
    fn a_grid_past_the_devices_limits_names_the_axis_and_the_limit() {
        let h200 = limits(232_448);
        assert_eq!(check_grid([i32::MAX as u32, 65535, 65535], &h200, "NVIDIA H200"), Ok(()));
        let e = check_grid([1u32 << 31, 1, 1], &h200, "NVIDIA H200").unwrap_err();
        assert!(e.starts_with("the grid [2147483648, 1, 1] is larger than the device can launch"), "{e}");
        assert!(
            e.contains("x = 2147483648 exceeds NVIDIA H200's limit of 2147483647 (CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)")
        );
        let e = check_grid([1, 65536, 70000], &h200, "NVIDIA H200").unwrap_err();
        assert!(e.contains("y = 65536 exceeds") && e.contains("z = 70000 exceeds") && e.contains("DIM_Z"), "{e}");
        assert!(!e.contains("x = 1 "), "{e}");
    }
}

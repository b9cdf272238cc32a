//! GPU tests of variant choice and clusters (feature `gpu`): need an NVIDIA
//! GPU; the variant and cluster cases check what they can on GPUs before 9.0
//! (where sm_80 code runs and clusters are ignored).
//!
//! The kernels are the hand-written PTX of `tests/ptx` (the launch ABI) with
//! the Tile IR of `tests/common`. The TMA variant is `affine.ptx` with one
//! tensor map parameter appended (as the ABI puts maps last) and a result
//! offset by 0.5, so a test sees which variant ran.
#![cfg(feature = "gpu")]

mod common;

use common::{affine_kernel, gpu, leak, leak_meta, scale_kernel, Rng};
use tile_runtime::__private::{launch, KernelArg};
use tile_runtime::{assert_close, f16, DeviceTensor, Error, KernelTarget, Stream, TensorMapMeta};

fn sm90(ptx: &str) -> String {
    ptx.replace(".target sm_80", ".target sm_90a")
}

/// `affine` taking a tensor map of `x` after its other parameters, adding 0.5.
fn affine_with_map() -> String {
    let ptx = include_str!("ptx/affine.ptx");
    let with_param =
        ptx.replace(".param .u32 p_beta\n", ".param .u32 p_beta,\n    .param .align 64 .b8 p_map_x[128]\n");
    let marked = with_param.replace(
        "    mul.wide.s32 %rd5, %r7, 4;\n",
        "    add.rn.f32 %f3, %f3, 0f3F000000;\n    mul.wide.s32 %rd5, %r7, 4;\n",
    );
    assert!(marked != with_param && with_param != ptx, "affine.ptx changed; update this test");
    sm90(&marked)
}

const MAP_X: &[TensorMapMeta] = &[TensorMapMeta { tensor: 0, box_shape: &[8, 64], swizzle_bytes: 0 }];

#[test]
fn the_tma_variant_runs_only_on_addressable_tensors() {
    let (device, stream) = gpu();
    let plain = include_str!("ptx/affine.ptx");
    let meta = leak_meta(
        &affine_kernel(),
        vec![
            KernelTarget {
                arch: "sm_90a",
                schedule: "tma_copy",
                ptx: leak(affine_with_map()),
                shared_bytes: 0,
                threads: 256,
                tensor_maps: MAP_X,
                persistent: false,
                cubin: None,
            },
            KernelTarget {
                arch: "sm_90a",
                schedule: "general",
                ptx: leak(sm90(plain)),
                shared_bytes: 0,
                threads: 256,
                tensor_maps: &[],
                persistent: false,
                cubin: None,
            },
            KernelTarget {
                arch: "sm_80",
                schedule: "general",
                ptx: plain,
                shared_bytes: 0,
                threads: 256,
                tensor_maps: &[],
                persistent: false,
                cubin: None,
            },
        ],
    );
    let hopper = device.compute_capability().unwrap().0 == 9;
    let mut rng = Rng::new(5);
    // 1000 f16 columns: 2000-byte rows, TMA-addressable; 1001: 2002 bytes, not.
    for (m, n, addressable) in [(37, 1000, true), (37, 1001, false), (3, 8, true), (5, 3, false)] {
        let x: Vec<f16> = (0..m * n).map(|_| f16::from_f64(rng.f64() * 8.0)).collect();
        let xt = DeviceTensor::from_slice(&stream, &x, &[m, n]).unwrap();
        let mut yt = DeviceTensor::<f32>::zeros(&stream, &[m, n]).unwrap();
        let alpha = f16::from_f64(0.625);
        // Twice: the second launch takes the loaded module and the cached map.
        let before = device.launch_counts(meta);
        for _ in 0..2 {
            launch(
                &stream,
                meta,
                &mut [KernelArg::tensor(&xt), KernelArg::tensor_mut(&mut yt), KernelArg::F16(alpha), KernelArg::U32(3)],
            )
            .unwrap();
        }
        let ran: Vec<u64> = device.launch_counts(meta).iter().zip(&before).map(|(a, b)| a - b).collect();
        let expected = match (hopper, addressable) {
            (true, true) => vec![2, 0, 0],
            (true, false) => vec![0, 2, 0],
            (false, _) => vec![0, 0, 2],
        };
        assert_eq!(ran, expected, "{m}x{n}");
        let offset = if hopper && addressable { 0.5 } else { 0.0 };
        let reference: Vec<f64> =
            x.iter().map(|v| (f16::from_f64(v.to_f64() * alpha.to_f64()).to_f32() + 3.0 + offset) as f64).collect();
        assert_eq!(assert_close(&yt.to_vec(&stream).unwrap(), &reference, 0.0), Ok(0.0), "{m}x{n}");
    }
}

#[test]
fn a_map_that_cannot_be_encoded_names_the_kernel_and_tensor() {
    let (device, stream) = gpu();
    if device.compute_capability().unwrap().0 != 9 {
        eprintln!("skipping: tensor maps need compute capability 9.x");
        return;
    }
    // A box of 300 rows: the driver's limit is 256 (a compiler bug if it
    // happened; the runtime still reports it rather than launching).
    const TOO_TALL: &[TensorMapMeta] = &[TensorMapMeta { tensor: 0, box_shape: &[300, 64], swizzle_bytes: 0 }];
    let meta = leak_meta(
        &affine_kernel(),
        vec![
            KernelTarget {
                arch: "sm_90a",
                schedule: "tma_copy",
                ptx: leak(affine_with_map()),
                shared_bytes: 0,
                threads: 256,
                tensor_maps: TOO_TALL,
                persistent: false,
                cubin: None,
            },
            KernelTarget {
                arch: "sm_90a",
                schedule: "general",
                ptx: leak(sm90(include_str!("ptx/affine.ptx"))),
                shared_bytes: 0,
                threads: 256,
                tensor_maps: &[],
                persistent: false,
                cubin: None,
            },
        ],
    );
    let xt = DeviceTensor::<f16>::zeros(&stream, &[400, 64]).unwrap();
    let mut yt = DeviceTensor::<f32>::zeros(&stream, &[400, 64]).unwrap();
    let err = launch(
        &stream,
        meta,
        &mut [KernelArg::tensor(&xt), KernelArg::tensor_mut(&mut yt), KernelArg::F16(f16::ONE), KernelArg::U32(0)],
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Launch { .. }), "{err:?}");
    assert!(text.contains("`affine`") && text.contains("tensor `x`") && text.contains("1..=256"), "{text}");
}

fn scale_meta_with_cluster(cluster: [u32; 3]) -> &'static tile_runtime::KernelMeta {
    let mut k = scale_kernel();
    k.cluster = cluster;
    let ptx = include_str!("ptx/scale.ptx");
    leak_meta(
        &k,
        vec![
            KernelTarget {
                arch: "sm_80",
                schedule: "general",
                ptx,
                shared_bytes: 100 * 1024,
                threads: 128,
                tensor_maps: &[],
                persistent: false,
                cubin: None,
            },
            KernelTarget {
                arch: "sm_90a",
                schedule: "general",
                ptx: leak(sm90(ptx)),
                shared_bytes: 100 * 1024,
                threads: 128,
                tensor_maps: &[],
                persistent: false,
                cubin: None,
            },
        ],
    )
}

fn run_scale(stream: &Stream, meta: &'static tile_runtime::KernelMeta, n: usize, seed: u64) -> Result<(), Error> {
    let mut rng = Rng::new(seed);
    let a: Vec<f32> = (0..n).map(|_| rng.f64() as f32).collect();
    let at = DeviceTensor::from_slice(stream, &a, &[n]).unwrap();
    let mut ct = DeviceTensor::<f32>::zeros(stream, &[n]).unwrap();
    launch(stream, meta, &mut [KernelArg::tensor(&at), KernelArg::tensor_mut(&mut ct), KernelArg::F32(-1.5)])?;
    let reference: Vec<f64> = a.iter().map(|&v| (v * -1.5) as f64).collect();
    assert_eq!(assert_close(&ct.to_vec(stream).unwrap(), &reference, 0.0), Ok(0.0), "n = {n}");
    Ok(())
}

#[test]
fn clustered_launches_give_the_same_results() {
    let (device, stream) = gpu();
    let clusters = device.compute_capability().unwrap().0 >= 9;
    let pairs = scale_meta_with_cluster([2, 1, 1]);
    // 1000 elements: 8 blocks of 128, a multiple of the cluster.
    run_scale(&stream, pairs, 1000, 1).unwrap();
    run_scale(&stream, pairs, 2 * 128 * 33, 2).unwrap();
    run_scale(&stream, scale_meta_with_cluster([8, 1, 1]), 8 * 128 * 3 - 5, 3).unwrap();
    // 1100 elements: 9 blocks.
    match run_scale(&stream, pairs, 1100, 4) {
        Err(Error::Launch { kernel, message }) if clusters => {
            assert_eq!(kernel, "scale");
            assert!(message.contains("x = 9 is not a multiple of 2"), "{message}");
        }
        Ok(()) if !clusters => {}
        other => panic!("{other:?}"),
    }
    // A cluster along an axis of extent 1 can never divide it.
    match run_scale(&stream, scale_meta_with_cluster([1, 2, 1]), 1024, 5) {
        Err(Error::Launch { message, .. }) if clusters => {
            assert!(message.contains("y = 1 is not a multiple of 2"), "{message}")
        }
        Ok(()) if !clusters => {}
        other => panic!("{other:?}"),
    }
}

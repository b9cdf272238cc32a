//! The generated module, and the attribute's options as the kernel and its
//! JSON carry them.

use super::{lower_err, lower_ok, ENV_LOCK, VECTOR_ADD};
use tile_ir::*;

#[test]
fn generated_module() {
    let _env = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("TILE_ARCHS", "");
    std::env::remove_var("TILE_DUMP");
    std::env::remove_var("TILE_PTXAS");
    let out =
        crate::expand::tile_kernel("threads = 256, consts(BLOCK = 1024)".parse().unwrap(), VECTOR_ADD.parse().unwrap())
            .to_string();
    if std::env::var_os("TILE_TEST_SHOW").is_some() {
        eprintln!("{out}");
    }
    assert!(out.starts_with("pub mod vector_add"), "{out}");
    assert!(!out.contains("compile_error"), "{out}");
    for needle in [
        "pub static META : :: tile :: KernelMeta",
        "name : \"vector_add\"",
        "targets : & []",
        "pub fn launch (stream : & :: tile :: Stream , a : & impl :: tile :: TensorArg < Elem = f32 > , b : & impl :: tile :: TensorArg < Elem = f32 > , c : & mut impl :: tile :: TensorArgMut < Elem = f32 >)",
        ":: tile :: __private :: launch (stream , & self :: META , & mut [:: tile :: __private :: KernelArg :: tensor (a) , :: tile :: __private :: KernelArg :: tensor (b) , :: tile :: __private :: KernelArg :: tensor_mut (c)])",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in {out}");
    }
    // On error: the module with an empty META and the same launch, plus the errors.
    let out = crate::expand::tile_kernel(
        "threads = 256".parse().unwrap(),
        "fn bad(x: &Tensor<bf16, N>, s: f16, q: Vec<u8>) { let y = nope; }".parse().unwrap(),
    )
    .to_string();
    assert!(out.contains("mod bad"), "{out}");
    assert!(out.contains("ir : \"\""), "{out}");
    assert!(out.contains("x : & impl :: tile :: TensorArg < Elem = :: tile :: bf16 >"), "{out}");
    assert!(out.contains("KernelArg :: F16 (s)"), "{out}");
    assert!(out.contains("q : impl :: core :: marker :: Sized"), "{out}");
    assert!(out.contains("compile_error"), "{out}");
    // An unknown target is an error.
    std::env::set_var("TILE_ARCHS", "sm_75");
    let out =
        crate::expand::tile_kernel("threads = 32".parse().unwrap(), "fn k(a: &Tensor<f32, 4>) { }".parse().unwrap())
            .to_string();
    assert!(out.contains("unknown target `sm_75`"), "{out}");
    std::env::set_var("TILE_ARCHS", "");
}

#[test]
fn cluster_and_warp_specialize_options() {
    let body = "fn k(a: &Tensor<f32, 64>) { }";
    let k = lower_ok("threads = 128", body);
    assert_eq!((k.cluster, k.warp_specialize), ([1, 1, 1], true));
    let k = lower_ok("threads = 128, cluster = (2, 1, 1), warp_specialize = false", body);
    assert_eq!((k.cluster, k.warp_specialize), ([2, 1, 1], false));
    // Missing extents are 1; a bare integer is the x extent.
    assert_eq!(lower_ok("cluster = (2, 4), threads = 64", body).cluster, [2, 4, 1]);
    assert_eq!(lower_ok("threads = 64, cluster = (4,)", body).cluster, [4, 1, 1]);
    assert_eq!(lower_ok("threads = 64, cluster = 8", body).cluster, [8, 1, 1]);
    assert_eq!(lower_ok("threads = 64, cluster = (1, 2, 4)", body).cluster, [1, 2, 4]);
    assert!(lower_ok("threads = 64, warp_specialize = true", body).warp_specialize);
    // The options survive the JSON the runtime reads.
    let k = lower_ok("threads = 64, cluster = (2, 2, 1), warp_specialize = false", body);
    let back: Kernel = serde_json::from_str(&serde_json::to_string(&k).unwrap()).unwrap();
    assert_eq!((back.cluster, back.warp_specialize), ([2, 2, 1], false));

    lower_err("threads = 64, cluster = (0, 1, 1)", body, &["a cluster extent of 0"]);
    lower_err(
        "threads = 64, cluster = (4, 4, 1)",
        body,
        &["`cluster = (4, 4, 1)` has 16 blocks; the portable limit is 8 blocks per cluster"],
    );
    lower_err("threads = 64, cluster = (2, 2, 2, 1)", body, &["at most 3 extents"]);
    // A name is a const parameter's (`generic.rs`); a plain kernel has none,
    // and a `consts(..)` name is not one.
    lower_err(
        "threads = 64, cluster = (2, x)",
        body,
        &["`cluster = (2, x, 1)`: `x` is not a const parameter of the kernel; a cluster extent is an integer literal or the name of a const parameter (`fn k<const CLUSTER: usize>(..)`)"],
    );
    let errs = lower_err(
        "threads = 64, consts(C = 2), cluster = (C, Y)",
        body,
        &["`cluster = (C, Y, 1)`: `C` is not a const parameter", "`cluster = (C, Y, 1)`: `Y` is not a const parameter"],
    );
    assert_eq!(errs.len(), 2, "{errs:#?}");
    lower_err("threads = 64, cluster = (2.0, 1)", body, &["a cluster extent must be a positive integer literal"]);
    lower_err("threads = 64, cluster = ()", body, &["empty cluster"]);
    lower_err(
        "threads = 64, cluster = CLUSTER",
        body,
        &["`cluster = (CLUSTER, 1, 1)`: `CLUSTER` is not a const parameter"],
    );
    lower_err("threads = 64, cluster = 2 + 1", body, &["expected `cluster = (x, y, z)`"]);
    lower_err("threads = 64, cluster = (2, 1, 1), cluster = (2, 1, 1)", body, &["`cluster` is given twice"]);
    lower_err("threads = 64, cluster = (99999999999, 1, 1)", body, &["not a small positive integer"]);
    lower_err("threads = 64, warp_specialize = 1", body, &["`warp_specialize` takes `true`"]);
    lower_err("threads = 64, warp_specialize = yes", body, &["`warp_specialize` takes `true`"]);
    lower_err(
        "threads = 64, warp_specialize = true, warp_specialize = false",
        body,
        &["`warp_specialize` is given twice"],
    );
    // A constant grid extent the cluster does not divide is a compile
    // error (here the missing y axis, extent 1).
    let k = lower_ok("threads = 64, cluster = (1, 2)", "fn k(a: &Tensor<f32, N>) { let bx = grid(cdiv(N, 64)); }");
    let errs = tile_ir::verify::verify(&k).unwrap_err();
    assert!(
        errs[0].message.contains("the grid's y extent is the constant 1, not a multiple of the cluster's 2"),
        "{errs:?}"
    );
    let k = lower_ok("threads = 64, cluster = (2, 1)", "fn k(a: &Tensor<f32, N>) { let bx = grid(cdiv(N, 64)); }");
    tile_ir::verify::verify(&k).unwrap();
    // Every mistake at once, and the other options still apply.
    let errs = lower_err(
        "threads = 64, cluster = (0, 1), warp_specialize = no, clustr = 2",
        body,
        &["extent of 0", "`warp_specialize` takes", "did you mean `cluster`"],
    );
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

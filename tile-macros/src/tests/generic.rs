//! Generic kernels: instances checked against the parameters, each
//! instance lowered with its types and constants, the generated module
//! (trait, impls, `launch::<..>`), and the errors (per instance, merged).

use super::ENV_LOCK;
use crate::backend::BuildEnv;
use crate::diag::Errors;
use crate::{attr, generics, lower, sig};
use tile_ir::*;

const AXPY: &str = r#"
pub fn axpy<T: Float, const BLOCK: usize, const THREADS: usize>(x: &Tensor<T, N>, y: &mut Tensor<T, N>, alpha: T) {
    let bx = grid(cdiv(N, BLOCK));
    let mut a = fragment::<T, BLOCK>();
    let mut b = fragment::<T, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut a);
    copy(y.tile([bx * BLOCK]), &mut b);
    for i in parallel(BLOCK) {
        b[i] = alpha * a[i] + b[i];
    }
    copy(&b, y.tile([bx * BLOCK]));
}
"#;

const AXPY_ATTR: &str = "threads = THREADS, instances((f32, 256, 128), (bf16, 1024, 256))";

/// Expands with no targets (the interpreter only) and returns the text.
fn expand(attr_src: &str, item_src: &str) -> String {
    let env = BuildEnv::plain(Vec::new());
    crate::expand::expand_with(attr_src.parse().unwrap(), item_src.parse().unwrap(), &env).to_string()
}

/// The compile errors' messages in an expansion.
fn messages(out: &str) -> Vec<String> {
    out.split("compile_error ! {").skip(1).map(|m| m.split(" }").next().unwrap_or("").trim().to_string()).collect()
}

/// Expands and requires each of `expected` in one of the error messages.
fn expand_err(attr_src: &str, item_src: &str, expected: &[&str]) -> Vec<String> {
    let errs = messages(&expand(attr_src, item_src));
    assert!(!errs.is_empty(), "expected errors, got none");
    for e in expected {
        assert!(errs.iter().any(|m| m.contains(e)), "no error contains {e:?}; errors: {errs:#?}");
    }
    errs
}

/// Lowers every instance of a generic kernel (no errors allowed).
fn instances(attr_src: &str, item_src: &str) -> Vec<Kernel> {
    let mut errors = Errors::default();
    let attr = attr::parse(attr_src.parse().unwrap(), &mut errors);
    let sig = sig::parse(item_src.parse().unwrap(), &mut errors).expect("a function");
    let decls = attr.instances.as_ref().map(|(d, _)| d.as_slice());
    let list = generics::check_instances("k", &sig.generics, decls, proc_macro2::Span::call_site(), &mut errors);
    let kernels = list.iter().map(|i| lower::lower_instance(&attr, &sig, Some(i), &mut errors).0).collect();
    assert!(errors.is_empty(), "{:#?}", errors.messages());
    kernels
}

#[test]
fn each_instance_lowers_with_its_types_and_constants() {
    let ks = instances(AXPY_ATTR, AXPY);
    assert_eq!(ks.len(), 2);
    let (f32k, bf16k) = (&ks[0], &ks[1]);
    assert_eq!(f32k.name, "axpy__f32_256_128");
    assert_eq!(bf16k.name, "axpy__bf16_1024_256");
    // `threads = THREADS` per instance.
    assert_eq!((f32k.threads, bf16k.threads), (128, 256));
    for (k, dtype, block) in [(f32k, DType::F32, 256), (bf16k, DType::BF16, 1024)] {
        // The tensors and the scalar take the instance's type.
        assert_eq!(k.buffers[0].dtype, dtype, "{}", k.name);
        assert_eq!(k.buffers[1].dtype, dtype, "{}", k.name);
        assert!(k.vars.iter().any(|v| v.name == "alpha" && v.dtype == dtype), "{}", k.name);
        // The const parameter is a constant; N stays dynamic.
        assert_eq!(k.buffers[0].shape, vec![Extent::Dyn(k.dims[0])], "{}", k.name);
        assert!(k.buffers.iter().any(|b| b.shape == vec![Extent::Const(block)] && b.dtype == dtype), "{}", k.name);
        assert_eq!(k.dims.len(), 1);
    }
    // A bare argument for a kernel with one parameter; a negative constant.
    let ks = instances(
        "threads = 32, instances(f16, bf16)",
        "fn k<T: Float16>(x: &mut Tensor<T, 32>) { for i in parallel(32) { x[i] = x[i] * (2 as T); } }",
    );
    assert_eq!(ks.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["k__f16", "k__bf16"]);
    let ks = instances(
        "threads = 32, instances(-3, 5)",
        "fn k<const C: i32>(x: &mut Tensor<i32, 32>) { for i in parallel(32) { x[i] = x[i] + C; } }",
    );
    assert_eq!(ks[0].name, "k__m3");
    // Named instances (`name = (..)`, also bare) keep the name as their
    // kernel's; the others are named from their arguments.
    let ks = instances(
        "threads = THREADS, instances(axpy_small = (f32, 256, 128), (bf16, 1024, 256), wide = (f16, 2048, 256))",
        AXPY,
    );
    assert_eq!(ks.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["axpy_small", "axpy__bf16_1024_256", "wide"]);
    assert_eq!((ks[0].threads, ks[2].threads), (128, 256));
    let ks = instances(
        "threads = 32, instances(twice = f16, bf16)",
        "fn k<T: Float16>(x: &mut Tensor<T, 32>) { for i in parallel(32) { x[i] = x[i] * (2 as T); } }",
    );
    assert_eq!(ks.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["twice", "k__bf16"]);
}

#[test]
fn generated_module_selects_the_instance_by_type() {
    let _env = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = expand(AXPY_ATTR, AXPY);
    assert!(!out.contains("compile_error"), "{out}");
    for needle in [
        "pub mod axpy",
        "pub trait Instance < T , const BLOCK : usize , const THREADS : usize >",
        "diagnostic :: on_unimplemented",
        "`axpy` has no instance `axpy::<{T}, {BLOCK}, {THREADS}>`",
        "the instances of `axpy` (its `#[tile_kernel(instances(..))]`, each compiled at build time) are `axpy::<f32, 256, 128>`, `axpy::<bf16, 1024, 256>`",
        "pub enum Instances { }",
        "pub static __META_0 : :: tile :: KernelMeta = :: tile :: KernelMeta { name : \"axpy__f32_256_128\"",
        "impl Instance < f32 , 256 , 128 > for Instances { const META : & 'static :: tile :: KernelMeta = & __META_0 ; }",
        "impl Instance < :: tile :: bf16 , 1024 , 256 > for Instances",
        "pub static INSTANCES : [& :: tile :: KernelMeta ; 2usize] = [& __META_0 , & __META_1]",
        "pub fn meta < T : :: tile :: Element , const BLOCK : usize , const THREADS : usize > () -> & 'static :: tile :: KernelMeta where Instances : Instance < T , BLOCK , THREADS >",
        "pub fn launch < T : :: tile :: Element , const BLOCK : usize , const THREADS : usize > (stream : & :: tile :: Stream , x : & impl :: tile :: TensorArg < Elem = T > , y : & mut impl :: tile :: TensorArgMut < Elem = T > , alpha : T)",
        ":: tile :: __private :: launch (stream , < Instances as Instance < T , BLOCK , THREADS >> :: META , & mut [:: tile :: __private :: KernelArg :: tensor (x) , :: tile :: __private :: KernelArg :: tensor_mut (y) , :: tile :: __private :: KernelArg :: element (alpha)])",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in {out}");
    }
    // Each instance's META carries its own IR.
    assert!(out.contains(r#"\"name\":\"axpy__bf16_1024_256\""#), "{out}");
    // After an error: the same module (every instance, empty METAs), and the error.
    let out = expand(AXPY_ATTR, &AXPY.replace("b[i] = alpha * a[i] + b[i];", "b[i] = nope;"));
    assert!(out.contains("impl Instance < :: tile :: bf16 , 1024 , 256 > for Instances"), "{out}");
    assert!(out.contains("ir : \"\""), "{out}");
    assert_eq!(messages(&out).len(), 1, "one error for both instances: {out}");
}

#[test]
fn instance_errors() {
    let k = "fn k<T: Float16, const BM: usize>(x: &mut Tensor<T, BM>) { }";
    expand_err("threads = 32", k, &["the generic kernel `k<T, BM>` lists its instances", "instances((f16, 128))"]);
    expand_err("threads = 32, instances()", k, &["`instances()` is empty"]);
    expand_err("threads = 32, instances((f16))", k, &["this instance has 1 argument, and `k<T, BM>` has 2 parameters"]);
    expand_err(
        "threads = 32, instances((f32, 64))",
        k,
        &["`f32` does not satisfy the bound `T: Float16` (f16 | bf16)"],
    );
    expand_err("threads = 32, instances((f64, 64))", k, &["`f64` is not an element type"]);
    expand_err("threads = 32, instances((64, f16))", k, &["the type parameter `T` takes an element type here"]);
    expand_err("threads = 32, instances((f16, BM))", k, &["the const parameter `BM: usize` takes an integer literal"]);
    expand_err("threads = 32, instances((f16, -64))", k, &["`-64` is not a `usize`"]);
    expand_err("threads = 32, instances((f16, 64), (f16, 64))", k, &["the instance `k::<f16, 64>` is listed twice"]);
    expand_err(
        "threads = 32, instances(small = (f16, 64), small = (bf16, 64))",
        k,
        &["the instances `k::<f16, 64>` and `k::<bf16, 64>` would both be the kernel `small`; give them different names"],
    );
    expand_err(
        "threads = 32, instances((f16, 64), k__f16_64 = (bf16, 64))",
        k,
        &["the instances `k::<f16, 64>` and `k::<bf16, 64>` would both be the kernel `k__f16_64`"],
    );
    expand_err("threads = 32, instances(small = (f16, 64), small = (f16, 64))", k, &["is listed twice"]);
    expand_err(
        "threads = 32, instances(f16)",
        "fn k(x: &mut Tensor<f16, 4>) { }",
        &["`instances(..)` on `k`, which has no generic parameters"],
    );
    expand_err(
        "threads = 32, instances(i32)",
        "fn k<T: Float>(x: &mut Tensor<T, 4>) { }",
        &["`i32` does not satisfy the bound `T: Float` (f16 | bf16 | f32)"],
    );
    expand_err(
        "threads = 32, instances(f32)",
        "fn k<T: Integer>(x: &mut Tensor<T, 4>) { }",
        &["does not satisfy the bound `T: Integer` (i32 | u32)"],
    );
}

#[test]
fn generic_parameter_errors() {
    let body = "(x: &mut Tensor<f32, 4>) { }";
    expand_err(
        "threads = 32, instances(f16)",
        &format!("fn k<T: Copy>{body}"),
        &["unknown bound on the type parameter `T`", "`Float16` (f16 | bf16)"],
    );
    expand_err(
        "threads = 32, instances(f16)",
        &format!("fn k<T: Float + Integer>{body}"),
        &["`Float` and `Integer` together allow no element type"],
    );
    expand_err(
        "threads = 32, instances(true)",
        &format!("fn k<const B: bool>{body}"),
        &["a kernel's const parameter is an integer"],
    );
    expand_err("threads = 32", &format!("fn k<'a>{body}"), &["no lifetime parameters"]);
    expand_err("threads = 32, instances(4)", &format!("fn k<const N: usize = 4>{body}"), &["has no default"]);
    expand_err(
        "threads = 32, instances(f16)",
        "fn k<T>(x: &mut Tensor<T, 4>) where T: Float16 { }",
        &["cannot have a `where` clause"],
    );
    expand_err(
        "threads = 32, instances((f16, f32))",
        &format!("fn k<T, T>{body}"),
        &["the generic parameter `T` is declared twice"],
    );
    // A type parameter used as a value, a const parameter used as a type.
    expand_err(
        "threads = 32, instances((f16, 4))",
        "fn k<T: Float16, const C: usize>(x: &mut Tensor<T, C>) { let v = T; }",
        &["`T` is a type parameter of the kernel: it names an element type"],
    );
    expand_err(
        "threads = 32, instances((f16, 4))",
        "fn k<T: Float16, const C: usize>(x: &mut Tensor<T, C>) { let mut s = shared::<C, 4>(); }",
        &["`C` is a const parameter of the kernel (an integer), not a type"],
    );
    expand_err(
        "threads = 32, instances(4)",
        "fn k<const C: usize>(x: &mut Tensor<C, 4>) { }",
        &["`C` is a const parameter (an integer), not an element type"],
    );
    // `threads = NAME` needs a const parameter, and a valid value per instance.
    expand_err(
        "threads = NOPE, instances(4)",
        "fn k<const C: usize>(x: &mut Tensor<f32, C>) { }",
        &["`NOPE` is not a const parameter"],
    );
    let errs = expand_err(
        "threads = C, instances(64, 48)",
        "fn k<const C: usize>(x: &mut Tensor<f32, C>) { }",
        &["`threads = 48`: the threads per block must be a multiple of 32 (the warp size) between 32 and 1024 (in instance `k::<48>`)"],
    );
    assert_eq!(errs.len(), 1, "{errs:#?}");
    // A type parameter is not a dimension; the module's own names are taken.
    expand_err(
        "threads = 32, instances(f16)",
        "fn k<T: Float16>(x: &mut Tensor<T, T>) { }",
        &["`T` is a type parameter of the kernel, not a dimension"],
    );
    expand_err(
        "threads = 32, instances(f16)",
        "fn k<Instances: Float16>(x: &mut Tensor<Instances, 4>) { }",
        &["`Instances` is the name of an item the kernel's module defines"],
    );
    // A const parameter may not shadow a `consts(..)` name.
    expand_err(
        "threads = 32, consts(C = 2), instances(4)",
        "fn k<const C: usize>(x: &mut Tensor<f32, C>) { }",
        &["has the name of a constant"],
    );
}

#[test]
fn errors_name_the_instances_that_have_them() {
    // Too much shared memory at BM = 8192 only (the verifier, every target).
    let k = "fn k<T: Float16, const BM: usize>(x: &mut Tensor<T, M, N>) { let mut s = shared::<T, BM, 64>(); copy(x.tile([0, 0]), &mut s); }";
    let errs = expand_err(
        "threads = 128, instances((f16, 64), (bf16, 64), (f16, 8192))",
        k,
        &["(in instance `k::<f16, 8192>`)"],
    );
    assert_eq!(errs.len(), 1, "{errs:#?}");
    // The same mistake in every instance: once, with no instance named.
    let errs = expand_err(
        "threads = 128, instances((f16, 64), (bf16, 64))",
        "fn k<T: Float16, const BM: usize>(x: &mut Tensor<T, BM>) { let y = nope; }",
        &["cannot find `nope`"],
    );
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(!errs[0].contains("in instance"), "{errs:#?}");
    // The same message in two of three instances: once, naming both.
    let errs = expand_err(
        "threads = 128, instances((8192, 1), (8192, 2), (64, 1))",
        "fn k<const BM: usize, const X: usize>(x: &mut Tensor<f16, M, N>) { let mut s = shared::<f16, BM, 64>(); copy(x.tile([0, X]), &mut s); }",
        &["(in instances `k::<8192, 1>`, `k::<8192, 2>`)"],
    );
    assert_eq!(errs.len(), 1, "{errs:#?}");
    // Messages that differ by instance (their types): one per instance.
    let errs = expand_err(
        "threads = 32, instances(f16, bf16, f32)",
        "fn k<T: Float>(x: &mut Tensor<T, 32>, h: f16) { for i in parallel(32) { x[i] = x[i] * h; } }",
        &[
            "the left side is `bf16` and the right side is `f16`",
            "(in instance `k::<bf16>`)",
            "(in instance `k::<f32>`)",
        ],
    );
    assert_eq!(errs.len(), 2, "{errs:#?}");
}

#[test]
fn dump_files_name_the_instance() {
    let dir = std::env::temp_dir().join(format!("tile-generic-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let env = BuildEnv { dump: Some(dir.clone()), ..BuildEnv::plain(vec![Target::Sm80]) };
    let out = crate::expand::expand_with(AXPY_ATTR.parse().unwrap(), AXPY.parse().unwrap(), &env).to_string();
    assert!(!out.contains("compile_error"), "{out}");
    for stem in ["axpy__f32_256_128", "axpy__bf16_1024_256"] {
        for ext in ["tile", "sm_80.ptx", "sm_80.thread", "sm_80.schedules.txt"] {
            let f = dir.join(format!("{stem}.{ext}"));
            assert!(f.exists(), "no {}", f.display());
        }
        // The PTX entry is the instance's name.
        let ptx = std::fs::read_to_string(dir.join(format!("{stem}.sm_80.ptx"))).unwrap();
        assert!(ptx.contains(&format!(".entry {stem}(")), "{ptx}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kernel whose shared buffer grows with `S`: `S = 48` (192 KiB) fits
/// sm_90a's shared memory but not sm_80's, `S = 16` (64 KiB) fits both.
const BIG_SHARED: &str = r#"
pub fn stage<const S: usize>(x: &Tensor<f32, N, 1024>, y: &mut Tensor<f32, N, 1024>) {
    let bx = grid(cdiv(N, S));
    let mut s = shared::<f32, S, 1024>();
    copy(x.tile([bx * S, 0]), &mut s);
    copy(&s, y.tile([bx * S, 0]));
}
"#;

#[test]
fn tune_names_const_parameters() {
    let k = "pub fn k<T: Float, const BM: usize, const BN: usize>(x: &mut Tensor<T, 32>) { let _b = grid(1); }";
    expand_err(
        "threads = 32, instances((f32, 1, 2)), tune(BX)",
        k,
        &["`tune(..)` names `BX`, which is not a generic parameter of `k`; its const parameters are BM, BN; did you mean `BM`?"],
    );
    expand_err(
        "threads = 32, instances((f32, 1, 2)), tune(T)",
        k,
        &["`T` is a type parameter: the caller chooses element types"],
    );
    expand_err("threads = 32, instances((f32, 1, 2)), tune(BM, BM)", k, &["`BM` is named twice in `tune(..)`"]);
    expand_err(
        "threads = 32, instances((f32, 1, 2)), tune()",
        k,
        &["`tune()` names no parameter; name the const parameters the autotuner picks, e.g. `tune(BM, BN)`"],
    );
    expand_err(
        "threads = 32, tune(BM)",
        "pub fn k(x: &mut Tensor<f32, 32>) { let _b = grid(1); }",
        &["`tune(..)` names the const parameters the autotuner picks among the instances, and `k` has no generic parameters"],
    );
    expand_err("threads = 32, instances((f32, 1, 2)), tune(BM), tune(BN)", k, &["`tune` is given twice"]);
}

#[test]
fn tuned_kernel_groups_by_the_untuned_parameters() {
    let out = expand(
        "threads = THREADS, instances((f32, 256, 128), (f32, 512, 128), (bf16, 1024, 256)), tune(BLOCK, THREADS)",
        AXPY,
    );
    assert!(!out.contains("compile_error"), "{out}");
    // One group per element type, candidates in the attribute's order.
    assert!(out.contains("impl Tuned < f32 > for Instances"), "{out}");
    assert!(out.contains("impl Tuned < :: tile :: bf16 > for Instances"), "{out}");
    assert!(out.contains(r#"name : "axpy::<f32>" , candidates : & [:: tile :: tune :: Candidate { config : "BLOCK = 256, THREADS = 128" , meta : & __META_0 } , :: tile :: tune :: Candidate { config : "BLOCK = 512, THREADS = 128" , meta : & __META_1 }]"#), "{out}");
    assert!(out.contains("pub fn launch_tuned < T : :: tile :: Element >"), "{out}");
    assert!(out.contains("pub fn launch_tuned_with < T : :: tile :: Element >"), "{out}");
    // Without `tune(..)` none of it.
    assert!(!expand(AXPY_ATTR, AXPY).contains("launch_tuned"));
}

#[test]
fn a_candidate_that_does_not_fit_a_target_is_dropped_there() {
    let dir = std::env::temp_dir().join(format!("tile-tune-drop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let env = BuildEnv { dump: Some(dir.clone()), ..BuildEnv::plain(vec![Target::Sm80, Target::Sm90a]) };
    let run =
        |attr: &str| crate::expand::expand_with(attr.parse().unwrap(), BIG_SHARED.parse().unwrap(), &env).to_string();
    // Tuned, with a smaller candidate that fits sm_80: no error; the big
    // instance has only its sm_90a variants, and a note says why.
    let out = run("threads = 128, instances(16, 48), tune(S)");
    assert!(!out.contains("compile_error"), "{}", messages(&out).join("\n"));
    let meta_1 = out.split("pub static __META_1").nth(1).unwrap().split("pub static").next().unwrap();
    assert!(meta_1.contains(r#"arch : "sm_90a""#) && !meta_1.contains(r#"arch : "sm_80""#), "{meta_1}");
    let meta_0 = out.split("pub static __META_0").nth(1).unwrap().split("pub static").next().unwrap();
    assert!(meta_0.contains(r#"arch : "sm_80""#) && meta_0.contains(r#"arch : "sm_90a""#));
    let note = std::fs::read_to_string(dir.join("stage__48.sm_80.dropped.txt")).expect("a note in TILE_DUMP");
    assert!(note.starts_with("`stage::<48>` is not a candidate of the tuned kernel on sm_80: it does not compile there (`stage::<16>` does)"), "{note}");
    assert!(!dir.join("stage__16.sm_80.dropped.txt").exists());
    // Untuned, or tuned with no candidate that fits sm_80: the error, as
    // for any kernel.
    for attr in ["threads = 128, instances(16, 48)", "threads = 128, instances(48), tune(S)"] {
        let errs = messages(&run(attr));
        assert!(errs.iter().any(|m| m.contains("(compiling for sm_80)")), "{attr}: {errs:#?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A copy whose cluster's x extent is the const parameter `CL`.
const CLUSTERED: &str = r#"
pub fn k<T: Float16, const CL: usize>(x: &Tensor<T, N>, y: &mut Tensor<T, N>) {
    let bx = grid(cdiv(N, 256));
    let mut t = fragment::<T, 256>();
    copy(x.tile([bx * 256]), &mut t);
    copy(&t, y.tile([bx * 256]));
}
"#;

#[test]
fn cluster_extents_may_name_const_parameters() {
    let attr = "threads = 128, cluster = (CL, 1, 1), instances((f16, 2), (f16, 1))";
    let ks = instances(attr, CLUSTERED);
    assert_eq!((ks[0].cluster, ks[1].cluster), ([2, 1, 1], [1, 1, 1]));
    let text = tile_ir::print::print_kernel(&ks[0]);
    assert!(text.contains("cluster=(2, 1, 1)"), "{text}");
    let text = tile_ir::print::print_kernel(&ks[1]);
    assert!(!text.contains("cluster="), "{text}");
    // The instances' META carry their own cluster.
    let out = expand(attr, CLUSTERED);
    assert!(!out.contains("compile_error"), "{}", messages(&out).join("\n"));
    let meta = |i: usize| {
        out.split(&format!("pub static __META_{i}")).nth(1).unwrap().split("pub static").next().unwrap().to_string()
    };
    assert!(meta(0).contains(r#"\"cluster\":[2,1,1]"#), "{}", meta(0));
    assert!(!meta(1).contains("cluster"), "{}", meta(1));
    // Literals and names mix, on any axis; a bare name is the x extent.
    let ks = instances("threads = 128, cluster = (2, CL), instances((f16, 4), (bf16, 1))", CLUSTERED);
    assert_eq!((ks[0].cluster, ks[1].cluster), ([2, 4, 1], [2, 1, 1]));
    let ks = instances("threads = 128, cluster = CL, instances((f16, 8))", CLUSTERED);
    assert_eq!(ks[0].cluster, [8, 1, 1]);
    // A tuned kernel whose candidates differ in cluster.
    let out = expand("threads = 128, cluster = (CL, 1, 1), instances((f16, 2), (f16, 1)), tune(CL)", CLUSTERED);
    assert!(!out.contains("compile_error"), "{}", messages(&out).join("\n"));
    assert!(out.contains(r#"candidates : & [:: tile :: tune :: Candidate { config : "CL = 2" , meta : & __META_0 } , :: tile :: tune :: Candidate { config : "CL = 1" , meta : & __META_1 }]"#), "{out}");
}

#[test]
fn cluster_names_are_checked_per_instance() {
    // Not a const parameter: once for every instance, at the name.
    let errs = expand_err(
        "threads = 128, cluster = (NOPE, 1, 1), instances((f16, 2), (f16, 1))",
        CLUSTERED,
        &["`cluster = (NOPE, 1, 1)`: `NOPE` is not a const parameter of the kernel; a cluster extent is an integer literal or the name of a const parameter (`fn k<const CLUSTER: usize>(..)`)"],
    );
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(!errs[0].contains("in instance"), "{errs:#?}");
    // A type parameter is not one either.
    expand_err("threads = 128, cluster = (T, 1, 1), instances((f16, 2))", CLUSTERED, &["`T` is not a const parameter"]);
    // Bad values, in the instances that have them.
    let errs = expand_err(
        "threads = 128, cluster = (CL, 1, 1), instances((f16, 2), (f16, 0), (bf16, 16))",
        CLUSTERED,
        &[
            "`cluster = (CL, 1, 1)` with `CL = 0`: every cluster extent is at least 1 (1 leaves that axis unclustered) (in instance `k::<f16, 0>`)",
            "`cluster = (CL, 1, 1)` with `CL = 16` is `(16, 1, 1)`, 16 blocks; the portable limit is 8 blocks per cluster (in instance `k::<bf16, 16>`)",
        ],
    );
    assert_eq!(errs.len(), 2, "{errs:#?}");
    expand_err(
        "threads = 128, cluster = (4, CL), instances((f16, 4))",
        CLUSTERED,
        &["`cluster = (4, CL, 1)` with `CL = 4` is `(4, 4, 1)`, 16 blocks"],
    );
    expand_err(
        "threads = 32, cluster = (CL, 1, 1), instances(-2, 5000000000)",
        "fn k<const CL: i64>(x: &mut Tensor<f32, N>) { let bx = grid(N); }",
        &[
            "`cluster = (CL, 1, 1)` with `CL = -2`: a cluster extent is a small positive integer (in instance `k::<-2>`)",
            "`cluster = (CL, 1, 1)` with `CL = 5000000000`: a cluster extent is a small positive integer",
        ],
    );
    // Each error is at the name that is wrong.
    for (attr, at) in [
        ("threads = 128, cluster = (2, NOPE), instances((f16, 2))", "NOPE"),
        ("threads = 128, cluster = (1, 1, CL), instances((f16, 0))", "CL"),
        ("threads = 128, cluster = (CL, 8), instances((f16, 2))", "CL"),
    ] {
        let mut errors = Errors::default();
        let attr = attr::parse(attr.parse().unwrap(), &mut errors);
        let sig = sig::parse(CLUSTERED.parse().unwrap(), &mut errors).expect("a function");
        let decls = attr.instances.as_ref().map(|(d, _)| d.as_slice());
        let list = generics::check_instances("k", &sig.generics, decls, proc_macro2::Span::call_site(), &mut errors);
        assert!(errors.is_empty(), "{:#?}", errors.messages());
        let (k, _) = lower::lower_instance(&attr, &sig, Some(&list[0]), &mut errors);
        assert_eq!(k.cluster, [1, 1, 1]);
        let errs = errors.into_single();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].span().source_text().as_deref(), Some(at), "{}", errs[0]);
    }
}

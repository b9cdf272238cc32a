//! Robustness: randomly mutated kernels (through their JSON form) never make
//! the verifier, the printer or the interpreter panic.

mod interp_kernels;

use interp_kernels::*;
use serde_json::Value as Json;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tile_ir::interp::{self, Arg};
use tile_ir::*;

/// Every enum variant name that a mutation may swap in for another.
const NAMES: &[&str] = &[
    "F16", "BF16", "F32", "I32", "U32", "I64", "Bool", "Global", "Shared", "Fragment", "Local", "Dim", "Param", "Loop",
    "Let", "Mut", "Neg", "Not", "Exp2", "Abs", "Add", "Sub", "Div", "Rem", "Max", "Lt", "Eq", "And", "Shl", "Shr",
    "Sum", "Min", "Serial", "Parallel", "Barrier",
];

fn leaves(j: &Json, out: &mut usize) {
    match j {
        Json::Array(a) => a.iter().for_each(|x| leaves(x, out)),
        Json::Object(o) => o.values().for_each(|x| leaves(x, out)),
        _ => *out += 1,
    }
}

/// Replaces the `target`-th leaf (numbers, strings, bools); also renames object keys that are variant names.
fn mutate(j: &mut Json, target: usize, counter: &mut usize, rng: &mut Rng) {
    match j {
        Json::Array(a) => {
            for x in a.iter_mut() {
                mutate(x, target, counter, rng);
            }
            // Sometimes drop or duplicate an element of the chosen array.
            if *counter == usize::MAX && !a.is_empty() {
                let i = rng.below(a.len() as u64) as usize;
                match rng.below(4) {
                    0 => {
                        a.remove(i);
                    }
                    1 => {
                        let x = a[i].clone();
                        a.push(x);
                    }
                    _ => {}
                }
                *counter = usize::MAX - 1;
            }
        }
        Json::Object(o) => {
            let keys: Vec<String> = o.keys().cloned().collect();
            for k in keys {
                let mut x = o.remove(&k).expect("key listed");
                mutate(&mut x, target, counter, rng);
                // Rename a variant key (`{"F32": 1.0}` → `{"I32": 1.0}`) when it is the target.
                let key = if *counter == usize::MAX - 2 && NAMES.contains(&k.as_str()) {
                    *counter = usize::MAX - 1;
                    NAMES[rng.below(NAMES.len() as u64) as usize].to_string()
                } else {
                    k
                };
                o.insert(key, x);
            }
        }
        leaf => {
            if *counter == target {
                *leaf = match (&*leaf, rng.below(3)) {
                    (Json::Number(_), 0) => Json::from(rng.below(12) as i64 - 2),
                    (Json::Number(_), 1) => Json::from(rng.below(300) as i64),
                    (Json::Number(n), _) => Json::from(n.as_f64().unwrap_or(0.0) * -1.5),
                    (Json::String(_), _) => Json::from(NAMES[rng.below(NAMES.len() as u64) as usize]),
                    (Json::Bool(b), _) => Json::from(!b),
                    (other, _) => other.clone(),
                };
                // Next: perhaps restructure an enclosing array or key.
                *counter = match rng.below(3) {
                    0 => usize::MAX,
                    1 => usize::MAX - 2,
                    _ => usize::MAX - 1,
                };
                return;
            }
            if *counter < usize::MAX - 2 {
                *counter += 1;
            }
        }
    }
}

/// The arguments of one launch: tensor bytes and shapes, scalars (with their
/// position among the arguments), dims and grid.
struct Launch {
    tensors: Vec<(Vec<u8>, Vec<usize>)>,
    scalars: Vec<(usize, Value)>,
    dims: Vec<i64>,
    grid: [u32; 3],
}

fn exercise(k: &Kernel, launch: &Launch) -> (usize, usize) {
    let base = serde_json::to_value(k).expect("serialize");
    let mut total = 0;
    leaves(&base, &mut total);
    let mut rng = Rng(0xdead_beef);
    let (mut parsed, mut ran_ok) = (0, 0);
    for round in 0..1500 {
        let mut j = base.clone();
        for _ in 0..1 + rng.below(3) {
            let target = rng.below(total as u64) as usize;
            let mut counter = 0;
            mutate(&mut j, target, &mut counter, &mut rng);
        }
        let Ok(m) = serde_json::from_value::<Kernel>(j) else { continue };
        parsed += 1;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let _ = tile_ir::verify::verify(&m);
            // The text form reads back to the same text (when every name is declared).
            let text = tile_ir::print::print_kernel(&m);
            // (Variables that appear nowhere in the text cannot come back; then names
            // printed as ids for ambiguity may print as names.)
            if let Ok(back) = tile_ir::print::parse_kernel(&text) {
                if back.vars.len() == m.vars.len() && back.buffers.len() == m.buffers.len() {
                    assert_eq!(tile_ir::print::print_kernel(&back), text);
                }
            }
            let mut tensors = launch.tensors.clone();
            let mut args: Vec<Arg> = tensors.iter_mut().map(|(b, s)| rw(b.as_mut_slice(), s)).collect();
            for &(at, value) in &launch.scalars {
                args.insert(at, Arg::Scalar(value));
            }
            interp::run(&m, &mut args, &launch.dims, launch.grid).is_ok()
        }));
        match outcome {
            Ok(ok) => ran_ok += ok as usize,
            Err(_) => panic!("round {round}: panic on mutated kernel:\n{}", tile_ir::print::print_kernel(&m)),
        }
    }
    (parsed, ran_ok)
}

#[test]
fn mutated_vector_add_never_panics() {
    let launch =
        Launch { tensors: vec![(vec![0u8; 400], vec![100]); 3], scalars: vec![], dims: vec![100], grid: [2, 1, 1] };
    let (parsed, ok) = exercise(&vector_add(64), &launch);
    eprintln!("vector_add: {parsed} mutants parsed, {ok} ran");
    assert!(parsed > 300 && ok > 10, "the mutator should produce runnable mutants ({parsed}, {ok})");
}

#[test]
fn mutated_softmax_never_panics() {
    let launch = Launch {
        tensors: vec![(vec![0u8; 2 * 3 * 7], vec![3, 7]); 2],
        scalars: vec![],
        dims: vec![3, 7],
        grid: [2, 1, 1],
    };
    let (parsed, ok) = exercise(&softmax(2, 8), &launch);
    eprintln!("softmax: {parsed} mutants parsed, {ok} ran");
    assert!(parsed > 300 && ok > 10, "the mutator should produce runnable mutants ({parsed}, {ok})");
}

/// Mutants of the kernel with every statement and expression kind.
#[test]
fn mutated_every_construct_never_panics() {
    let launch = Launch {
        tensors: vec![(vec![0u8; 4 * 4 * 9], vec![9, 4])],
        scalars: vec![(1, Value::F32(0.5))],
        dims: vec![9],
        grid: [2, 2, 1],
    };
    let (parsed, ok) = exercise(&every_construct(), &launch);
    eprintln!("every_construct: {parsed} mutants parsed, {ok} ran");
    assert!(parsed > 300 && ok > 10, "the mutator should produce runnable mutants ({parsed}, {ok})");
}

//! Unit tests of the frontend: kernels parsed from strings, lowered, and
//! checked by structure (the IR) or by their error messages. This file has
//! the helpers and the shared kernels; the tests are by topic: `lowering.rs`
//! (what kernels lower to), `errors.rs` (every kind of mistake, and that
//! none panics), `expand.rs` (the generated module and the attribute's
//! options), `gemm.rs` (`gemm`, `use_swizzle`, `annotate_layout`, run in
//! the interpreter), `generic.rs` (generic kernels: instances, their
//! lowering, expansion and errors).

mod errors;
mod expand;
mod fuzz;
mod gemm;
mod generic;
mod helpers;
mod lowering;

use crate::diag::Errors;
use crate::{attr, lower, sig};
use tile_ir::*;

/// Runs attribute + signature + lowering on source text.
pub(crate) fn lower_src(attr_src: &str, item_src: &str) -> (Option<Kernel>, Vec<String>) {
    let mut errors = Errors::default();
    let attr = attr::parse(attr_src.parse().expect("attr tokens"), &mut errors);
    match sig::parse(item_src.parse().expect("item tokens"), &mut errors) {
        Ok(sig) => {
            let (k, _spans) = lower::lower(&attr, &sig, &mut errors);
            (Some(k), errors.messages())
        }
        Err(e) => {
            errors.push(e);
            (None, errors.messages())
        }
    }
}

pub(crate) fn lower_ok(attr_src: &str, item_src: &str) -> Kernel {
    let (k, errs) = lower_src(attr_src, item_src);
    assert!(errs.is_empty(), "unexpected errors: {errs:#?}");
    k.expect("kernel")
}

/// The errors of a kernel that must fail; each `expected` must appear in one message.
pub(crate) fn lower_err(attr_src: &str, item_src: &str, expected: &[&str]) -> Vec<String> {
    let (_, errs) = lower_src(attr_src, item_src);
    assert!(!errs.is_empty(), "expected errors, got none");
    for e in expected {
        assert!(errs.iter().any(|m| m.contains(e)), "no error contains {e:?}; errors: {errs:#?}");
    }
    errs
}

/// The errors the macro reports for a kernel that must fail: the
/// frontend's, or, when it lowered, the verifier's (as `backend.rs` runs
/// it). For the tile-op rules that live in `tile_ir::verify`.
pub(crate) fn verified_err(attr_src: &str, item_src: &str, expected: &[&str]) -> Vec<String> {
    let (k, mut errs) = lower_src(attr_src, item_src);
    if errs.is_empty() {
        if let Err(found) = tile_ir::verify::verify(&k.expect("kernel")) {
            errs.extend(found.into_iter().map(|e| e.message));
        }
    }
    assert!(!errs.is_empty(), "expected errors, got none");
    for e in expected {
        assert!(errs.iter().any(|m| m.contains(e)), "no error contains {e:?}; errors: {errs:#?}");
    }
    errs
}

fn walk<'a>(stmts: &'a [Stmt], out: &mut Vec<&'a Stmt>) {
    for s in stmts {
        out.push(s);
        match &s.kind {
            StmtKind::For { body, .. } => walk(body, out),
            StmtKind::If { then, otherwise, .. } => {
                walk(then, out);
                walk(otherwise, out);
            }
            _ => {}
        }
    }
}

pub(crate) fn all_stmts(k: &Kernel) -> Vec<&Stmt> {
    let mut v = Vec::new();
    walk(&k.body, &mut v);
    v
}

pub(crate) const VECTOR_ADD: &str = r#"
pub fn vector_add(a: &Tensor<f32, N>, b: &Tensor<f32, N>, c: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut x = fragment::<f32, BLOCK>();
    let mut y = fragment::<f32, BLOCK>();
    copy(a.tile([bx * BLOCK]), &mut x);
    copy(b.tile([bx * BLOCK]), &mut y);
    for i in parallel(BLOCK) {
        x[i] = x[i] + y[i];
    }
    copy(&x, c.tile([bx * BLOCK]));
}
"#;

/// Serializes the tests that set environment variables.
pub(crate) static ENV_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

//! Element access: loads, stores and the element of an `atomic_add`.
//!
//! Checks: the buffer exists; one index per dimension, each `I32`; a
//! `Store` writes a non-global buffer or a mutable global, with a value of
//! the element type; fragments are accessed only inside `Parallel` loops,
//! each index a loop variable of the enclosing parallel nest (or the
//! constant `0` on an extent-1 dimension, a broadcast).

use super::Verifier;
use crate::ir::{BufferId, DType, Expr, Extent, Scope, Value};

impl Verifier<'_> {
    pub(super) fn check_store(&mut self, buf: &BufferId, index: &[Expr], value: &Expr) {
        let t = self.expr(value);
        self.access(*buf, index, "store to");
        if let Some(b) = self.buffer(*buf) {
            if b.scope == Scope::Global && !b.mutable {
                self.err(format!("store to `{}`, a read-only tensor; declare it `&mut Tensor`", b.name));
            }
            if let Some(t) = t {
                if t != b.dtype {
                    self.err(format!(
                        "store to `{}`: the value has type {t}, the buffer's elements {}",
                        b.name, b.dtype
                    ));
                }
            }
        }
    }

    /// Checks an element access (`Load`, `Store`, `AtomicAdd`): buffer
    /// exists, arity, index types, fragment placement.
    pub(super) fn access(&mut self, buf: BufferId, index: &[Expr], what: &str) {
        let mut types = Vec::with_capacity(index.len());
        for e in index {
            types.push(self.expr(e));
        }
        let Some(b) = self.buffer(buf) else {
            self.err(format!("{what} {buf}, which does not exist"));
            return;
        };
        if index.len() != b.rank() {
            self.err(format!("{what} `{}` with {} indices, but it has rank {}", b.name, index.len(), b.rank()));
        }
        for (i, t) in types.into_iter().enumerate() {
            if let Some(t) = t {
                if t != DType::I32 {
                    self.err(format!("{what} `{}`: index {i} has type {t}, expected i32", b.name));
                }
            }
        }
        if b.scope == Scope::Fragment {
            if !self.in_parallel() {
                self.err(format!(
                    "{what} fragment `{}` outside a parallel loop; fragment elements are accessed only in `for .. in parallel(..)`",
                    b.name
                ));
            } else {
                for (i, e) in index.iter().enumerate() {
                    let ok = match e {
                        Expr::Var(v) => self.parallel_vars.contains(v),
                        Expr::Const(Value::I32(0)) => b.shape.get(i) == Some(&Extent::Const(1)),
                        _ => false,
                    };
                    if !ok {
                        self.err(format!(
                            "{what} fragment `{}`: index {i} must be a variable of the enclosing parallel loops \
                             (or 0 on a dimension of extent 1)",
                            b.name
                        ));
                    }
                }
            }
        }
    }
}

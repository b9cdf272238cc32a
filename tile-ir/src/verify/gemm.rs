//! `gemm(a, b, c)`: `c += op(a) · op(b)` on tensor cores.
//!
//! Checks: not inside a parallel loop; `a` is a shared buffer or a fragment,
//! `b` a shared buffer, `c` a fragment, all of rank 2; `a` and `b` hold the
//! same type, f16 or bf16; `c` holds f32; with `op(a)` = `[M, K]` and
//! `op(b)` = `[K, N]` (transposed when `trans_*` is set), `c` is `[M, N]`
//! ([`super::rules::gemm_mismatch`]). With `policy(Warpgroup(w))`: the
//! block has whole warpgroups, `w` among them, and `c` has 64 rows (one
//! warpgroup's).

use super::rules::{
    gemm_a_scope_ok, gemm_b_scope_ok, gemm_fitting_transposes, gemm_mismatch, gemm_operand_dtype_ok,
    gemm_operand_extents,
};
use super::{scope_name, Verifier};
use crate::ir::{BufferId, DType, Scope, WarpPolicy};

impl Verifier<'_> {
    pub(super) fn check_gemm(&mut self, a: BufferId, b: BufferId, c: BufferId, trans_a: bool, trans_b: bool) {
        self.no_tile_op_in_parallel("gemm");
        let (Some(ab), Some(bb), Some(cb)) = (self.buffer(a), self.buffer(b), self.buffer(c)) else {
            let (al, bl, cl) = (self.bl(a), self.bl(b), self.bl(c));
            self.err(format!("gemm of {al} and {bl} into {cl}: no such buffer"));
            return;
        };
        // Operands are named as the kernel writes them (`b_s.t()`).
        let t = |trans: bool| if trans { ".t()" } else { "" };
        let (an, bn) = (format!("`{}{}`", ab.name, t(trans_a)), format!("`{}{}`", bb.name, t(trans_b)));
        if !gemm_a_scope_ok(ab.scope) {
            self.err(format!(
                "gemm: operand A {an} is a {}, expected a shared buffer or a fragment",
                scope_name(ab.scope)
            ));
        }
        if !gemm_b_scope_ok(bb.scope) {
            self.err(format!("gemm: operand B {bn} is a {}, expected a shared buffer", scope_name(bb.scope)));
        }
        if cb.scope != Scope::Fragment {
            self.err(format!("gemm: the accumulator `{}` is a {}, expected a fragment", cb.name, scope_name(cb.scope)));
        }
        for (name, buf) in [(&an, ab), (&bn, bb)] {
            if !gemm_operand_dtype_ok(buf.dtype) {
                self.err(format!("gemm: operand {name} holds {}; operands hold f16 or bf16", buf.dtype));
            }
        }
        if ab.dtype != bb.dtype && gemm_operand_dtype_ok(ab.dtype) && gemm_operand_dtype_ok(bb.dtype) {
            self.err(format!("gemm: operands {an} ({}) and {bn} ({}) hold different types", ab.dtype, bb.dtype));
        }
        if cb.dtype != DType::F32 {
            self.err(format!("gemm: the accumulator `{}` holds {}, expected f32", cb.name, cb.dtype));
        }
        let mut ranks_ok = true;
        for (name, buf) in [(an.clone(), ab), (bn.clone(), bb), (format!("`{}`", cb.name), cb)] {
            if buf.rank() != 2 {
                self.err(format!("gemm: {name} has rank {}, expected a matrix (rank 2)", buf.rank()));
                ranks_ok = false;
            }
        }
        let (Some(sa), Some(sb), Some(sc)) = (ab.const_shape(), bb.const_shape(), cb.const_shape()) else {
            return;
        };
        if !ranks_ok {
            return;
        }
        let (m_a, k_a) = gemm_operand_extents(&sa, trans_a);
        let (k_b, n_b) = gemm_operand_extents(&sb, trans_b);
        let (m_c, n_c) = (sc[0], sc[1]);
        if let Some(what) = gemm_mismatch((m_a, k_a), (k_b, n_b), (m_c, n_c)) {
            // The transposes that would make the shapes agree.
            let hint = gemm_fitting_transposes(&sa, &sb, &sc, trans_a, trans_b).map_or_else(String::new, |(x, y)| {
                format!("; `gemm(&{}{}, &{}{}, ..)` would fit", ab.name, t(x), bb.name, t(y))
            });
            self.err(format!(
                "gemm shape mismatch: {an} {sa:?} is M×K = {m_a}×{k_a}, {bn} {sb:?} is K×N = {k_b}×{n_b}, `{}` {sc:?} is M×N = {m_c}×{n_c}: {what}{hint}",
                cb.name
            ));
        }
    }

    /// The rules of `policy(Warpgroup(w))` for the accumulator `c`.
    pub(super) fn check_gemm_owner(&mut self, c: BufferId, policy: WarpPolicy) {
        let Some(w) = policy.owner() else { return };
        let threads = self.kernel.threads;
        if threads % 128 != 0 || w >= threads / 128 {
            self.err(format!(
                "gemm with `policy(Warpgroup({w}))`: the block's {threads} threads have {} whole warpgroups (128 threads each), so warpgroup {w} does not exist",
                threads / 128
            ));
        }
        let Some(cb) = self.buffer(c) else { return };
        if let Some(shape) = cb.const_shape() {
            if shape.first().is_some_and(|&m| m != 64) {
                self.err(format!(
                    "gemm with `policy(Warpgroup({w}))`: the accumulator `{}` has {} rows; one warpgroup computes 64 (M = 64)",
                    cb.name, shape[0]
                ));
            }
        }
    }
}

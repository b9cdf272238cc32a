//! The rules of tile ops as pure functions, for the checks in this folder
//! and for the frontend, which needs some answers while it lowers (to point
//! at the operand at fault, or to word a fix): each rule is written once,
//! here.

use crate::ir::DType;

/// Whether `as` between the two types is allowed: numeric ↔ numeric, same
/// type, or `bool` → integer (as Rust).
pub fn cast_allowed(from: DType, to: DType) -> bool {
    let numeric = |t: DType| t.is_float() || t.is_int();
    from == to || (numeric(from) && numeric(to)) || (from == DType::Bool && to.is_int())
}

/// Which extents of a gemm disagree, given `op(a)` = `[M, K]`, `op(b)` =
/// `[K, N]` and `c` = `[M, N]`: e.g. `"K disagrees (32 from A, 48 from B)"`,
/// or `None` when they agree. Shared with the frontend's message.
pub fn gemm_mismatch(a_mk: (i64, i64), b_kn: (i64, i64), c_mn: (i64, i64)) -> Option<String> {
    let mut parts = Vec::new();
    if a_mk.0 != c_mn.0 {
        parts.push(format!("M disagrees ({} from A, {} from the accumulator)", a_mk.0, c_mn.0));
    }
    if b_kn.1 != c_mn.1 {
        parts.push(format!("N disagrees ({} from B, {} from the accumulator)", b_kn.1, c_mn.1));
    }
    if a_mk.1 != b_kn.0 {
        parts.push(format!("K disagrees ({} from A, {} from B)", a_mk.1, b_kn.0));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

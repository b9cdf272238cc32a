//! The rules of tile ops and operators as pure functions: the checks in
//! this folder call them, and so does the frontend where it needs the answer
//! while it lowers (to point at the operand at fault, or to word a fix).
//! Each rule is written once, here.
//!
//! Expects plain facts (scopes, types, constant shapes); guarantees nothing
//! beyond the answer.

use crate::ir::{BinOp, DType, Scope, UnOp};

/// Whether a block may have `threads` threads: a positive multiple of 32
/// (whole warps), at most 1024.
pub fn threads_ok(threads: u64) -> bool {
    // `%` rather than `is_multiple_of`: the workspace supports Rust 1.85.
    #[allow(clippy::manual_is_multiple_of)]
    let whole_warps = threads % 32 == 0;
    threads != 0 && whole_warps && threads <= 1024
}

/// The most blocks a kernel may ask to share an SM (`blocks_per_sm`): the
/// H100/H200's and the A100's 32 resident blocks.
pub const MAX_BLOCKS_PER_SM: u64 = 32;

/// The most threads one SM holds at once (2,048 on sm_80 and sm_90).
pub const MAX_THREADS_PER_SM: u64 = 2048;

/// Whether `blocks` blocks of `threads` threads may share one SM
/// (`blocks_per_sm`): 1 to [`MAX_BLOCKS_PER_SM`], at most
/// [`MAX_THREADS_PER_SM`] threads in all. `None` when that holds, else why not.
pub fn blocks_per_sm_problem(blocks: u64, threads: u64) -> Option<String> {
    if blocks == 0 || blocks > MAX_BLOCKS_PER_SM {
        Some(format!("`blocks_per_sm = {blocks}` must be between 1 and {MAX_BLOCKS_PER_SM}"))
    } else if blocks * threads > MAX_THREADS_PER_SM {
        Some(format!(
            "`blocks_per_sm = {blocks}` with {threads} threads per block is {} threads, more than the {MAX_THREADS_PER_SM} an SM holds; ask for at most {} blocks",
            blocks * threads,
            (MAX_THREADS_PER_SM / threads.max(1)).max(1)
        ))
    } else {
        None
    }
}

/// Whether `as` between the two types is allowed: numeric ↔ numeric, same
/// type, or `bool` → integer (as Rust).
pub fn cast_allowed(from: DType, to: DType) -> bool {
    let numeric = |t: DType| t.is_float() || t.is_int();
    from == to || (numeric(from) && numeric(to)) || (from == DType::Bool && to.is_int())
}

/// Whether the unary operator is defined on `t`: `neg` and `abs` on floats
/// and signed integers, `not` on `bool` and integers, the other math
/// intrinsics on floats.
pub fn unop_defined(op: UnOp, t: DType) -> bool {
    match op {
        UnOp::Neg | UnOp::Abs => t.is_float() || matches!(t, DType::I32 | DType::I64),
        UnOp::Not => t == DType::Bool || t.is_int(),
        UnOp::Exp2 | UnOp::Exp | UnOp::Log2 | UnOp::Log | UnOp::Sqrt | UnOp::Rsqrt => t.is_float(),
    }
}

/// Whether the binary operator is defined on two operands of type `t`:
/// arithmetic on numbers, `and`/`or`/`xor` on `bool` and integers, shifts
/// on integers, comparisons on every type.
pub fn binop_defined(op: BinOp, t: DType) -> bool {
    match op {
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem | BinOp::Min | BinOp::Max => t != DType::Bool,
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => true,
        BinOp::And | BinOp::Or | BinOp::Xor => t == DType::Bool || t.is_int(),
        BinOp::Shl | BinOp::Shr => t.is_int(),
    }
}

/// Where operand A of a gemm may be: a shared buffer or a fragment.
pub fn gemm_a_scope_ok(scope: Scope) -> bool {
    matches!(scope, Scope::Shared | Scope::Fragment)
}

/// Where operand B of a gemm may be: a shared buffer.
pub fn gemm_b_scope_ok(scope: Scope) -> bool {
    scope == Scope::Shared
}

/// The element types of gemm operands: f16 or bf16 (the same for both).
pub fn gemm_operand_dtype_ok(t: DType) -> bool {
    matches!(t, DType::F16 | DType::BF16)
}

/// The accumulator of a gemm: an f32 fragment.
pub fn gemm_accumulator_ok(scope: Scope, t: DType) -> bool {
    scope == Scope::Fragment && t == DType::F32
}

/// Which extents of a gemm disagree, given `op(a)` = `[M, K]`, `op(b)` =
/// `[K, N]` and `c` = `[M, N]`: e.g. `"K disagrees (32 from A, 48 from B)"`,
/// or `None` when they agree.
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

/// `[M, K]` of operand A stored as `shape` (`[K, M]` when transposed), or
/// `[K, N]` of operand B; `shape` has rank 2.
pub fn gemm_operand_extents(shape: &[i64], transposed: bool) -> (i64, i64) {
    if transposed {
        (shape[1], shape[0])
    } else {
        (shape[0], shape[1])
    }
}

/// The other reading of the operands (`(trans_a, trans_b)`, one changed
/// first, then both) under which rank-2 shapes `a`, `b`, `c` agree, if
/// any: the hint "`gemm(&a, &b.t(), ..)` would fit".
pub fn gemm_fitting_transposes(a: &[i64], b: &[i64], c: &[i64], trans_a: bool, trans_b: bool) -> Option<(bool, bool)> {
    let fits = |ta: bool, tb: bool| {
        gemm_mismatch(gemm_operand_extents(a, ta), gemm_operand_extents(b, tb), (c[0], c[1])).is_none()
    };
    [(trans_a, !trans_b), (!trans_a, trans_b), (!trans_a, !trans_b)].into_iter().find(|&(x, y)| fits(x, y))
}

/// The shape `reduce_*(src, dst, dim)` gives: `src` without `dim`; `None`
/// when `dim` is not below `src`'s rank.
pub fn reduce_result_shape(src: &[i64], dim: usize) -> Option<Vec<i64>> {
    (dim < src.len()).then(|| src.iter().enumerate().filter(|&(d, _)| d != dim).map(|(_, &e)| e).collect())
}

/// Whether `dst` may receive `reduce_*(src, dst, dim)`: the result's shape,
/// or `[1]` for a rank-1 `src` (a scalar kept as one element).
pub fn reduce_shape_ok(src: &[i64], dim: usize, dst: &[i64]) -> bool {
    reduce_result_shape(src, dim).is_some_and(|want| dst == want.as_slice() || (src.len() == 1 && dst == [1]))
}

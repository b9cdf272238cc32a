//! The pure rules of `tile_ir::verify::rules`, which the verifier and the
//! frontend (`tile-macros`) both ask: each answer, including the edges.

use tile_ir::verify::rules::*;
use tile_ir::{BinOp, DType, Scope, UnOp};

#[test]
fn unary_operators() {
    for t in [DType::F16, DType::BF16, DType::F32] {
        for op in [UnOp::Neg, UnOp::Abs, UnOp::Exp2, UnOp::Exp, UnOp::Log2, UnOp::Log, UnOp::Sqrt, UnOp::Rsqrt] {
            assert!(unop_defined(op, t), "{op:?} on {t}");
        }
        assert!(!unop_defined(UnOp::Not, t), "not on {t}");
    }
    assert!(unop_defined(UnOp::Neg, DType::I32) && unop_defined(UnOp::Abs, DType::I64));
    assert!(!unop_defined(UnOp::Neg, DType::U32) && !unop_defined(UnOp::Abs, DType::Bool));
    assert!(!unop_defined(UnOp::Exp2, DType::I32) && !unop_defined(UnOp::Sqrt, DType::U32));
    assert!(unop_defined(UnOp::Not, DType::Bool) && unop_defined(UnOp::Not, DType::U32));
}

#[test]
fn binary_operators() {
    assert!(binop_defined(BinOp::Add, DType::F16) && !binop_defined(BinOp::Add, DType::Bool));
    assert!(binop_defined(BinOp::Max, DType::I32) && !binop_defined(BinOp::Min, DType::Bool));
    assert!(binop_defined(BinOp::And, DType::Bool) && binop_defined(BinOp::Xor, DType::U32));
    assert!(!binop_defined(BinOp::Or, DType::F32));
    assert!(binop_defined(BinOp::Shl, DType::I32) && !binop_defined(BinOp::Shr, DType::Bool));
    assert!(!binop_defined(BinOp::Shl, DType::F32));
    // Comparisons are defined on every type (the frontend adds that bools
    // are not ordered).
    for t in [DType::Bool, DType::F16, DType::I32] {
        assert!(binop_defined(BinOp::Lt, t) && binop_defined(BinOp::Eq, t), "{t}");
    }
}

#[test]
fn casts() {
    assert!(cast_allowed(DType::F32, DType::I32) && cast_allowed(DType::Bool, DType::U32));
    assert!(!cast_allowed(DType::Bool, DType::F32) && !cast_allowed(DType::F16, DType::Bool));
    assert!(cast_allowed(DType::Bool, DType::Bool));
}

#[test]
fn gemm_operands() {
    assert!(gemm_a_scope_ok(Scope::Shared) && gemm_a_scope_ok(Scope::Fragment));
    assert!(!gemm_a_scope_ok(Scope::Global) && !gemm_a_scope_ok(Scope::Local));
    assert!(gemm_b_scope_ok(Scope::Shared) && !gemm_b_scope_ok(Scope::Fragment));
    assert!(gemm_operand_dtype_ok(DType::F16) && gemm_operand_dtype_ok(DType::BF16));
    assert!(!gemm_operand_dtype_ok(DType::F32));
    assert!(gemm_accumulator_ok(Scope::Fragment, DType::F32));
    assert!(!gemm_accumulator_ok(Scope::Fragment, DType::F16) && !gemm_accumulator_ok(Scope::Shared, DType::F32));
}

#[test]
fn gemm_shapes() {
    assert_eq!(gemm_operand_extents(&[40, 24], false), (40, 24));
    assert_eq!(gemm_operand_extents(&[40, 24], true), (24, 40));
    assert_eq!(gemm_mismatch((64, 32), (32, 16), (64, 16)), None);
    assert_eq!(gemm_mismatch((64, 32), (48, 16), (64, 16)).as_deref(), Some("K disagrees (32 from A, 48 from B)"));
    // B stored [N, K]: read transposed, it fits; read as stored, it does not.
    assert_eq!(gemm_fitting_transposes(&[64, 32], &[16, 32], &[64, 16], false, false), Some((false, true)));
    assert_eq!(gemm_fitting_transposes(&[64, 32], &[32, 16], &[64, 16], false, true), Some((false, false)));
    // A changed first, then both.
    assert_eq!(gemm_fitting_transposes(&[32, 64], &[16, 32], &[64, 16], false, false), Some((true, true)));
    assert_eq!(gemm_fitting_transposes(&[64, 32], &[48, 16], &[64, 16], false, false), None);
}

#[test]
fn reduce_shapes() {
    assert_eq!(reduce_result_shape(&[4, 8], 1), Some(vec![4]));
    assert_eq!(reduce_result_shape(&[4, 8], 0), Some(vec![8]));
    assert_eq!(reduce_result_shape(&[4, 8], 2), None);
    assert_eq!(reduce_result_shape(&[128], 0), Some(vec![]));
    assert!(reduce_shape_ok(&[4, 8], 1, &[4]) && !reduce_shape_ok(&[4, 8], 1, &[8]));
    // A rank-1 source reduces to a scalar, kept as `[]` or `[1]`.
    assert!(reduce_shape_ok(&[128], 0, &[]) && reduce_shape_ok(&[128], 0, &[1]));
    assert!(!reduce_shape_ok(&[128], 0, &[2]) && !reduce_shape_ok(&[4, 8], 2, &[4]));
}

#[test]
fn threads_per_block() {
    for ok in [32, 64, 96, 1024] {
        assert!(threads_ok(ok), "{ok}");
    }
    for bad in [0, 16, 100, 1056, 2048] {
        assert!(!threads_ok(bad), "{bad}");
    }
}

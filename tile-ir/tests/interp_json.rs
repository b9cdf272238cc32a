//! The JSON form of constants (the frontend embeds kernels as JSON for the interpreter).
use tile_ir::*;

#[test]
fn non_finite_constants_round_trip_through_json() {
    for v in [
        Value::F32(f32::NEG_INFINITY),
        Value::F32(f32::INFINITY),
        Value::F32(f32::NAN),
        Value::F32(-0.0),
        Value::F32(1.5),
        Value::F16(half::f16::NEG_INFINITY),
        Value::BF16(half::bf16::NAN),
    ] {
        let j = serde_json::to_string(&v).unwrap();
        let back: Result<Value, _> = serde_json::from_str(&j);
        let back = back.unwrap_or_else(|e| panic!("{v:?} -> {j} does not read back: {e}"));
        let same = match (v, back) {
            (Value::F32(a), Value::F32(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            (Value::F16(a), Value::F16(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            (Value::BF16(a), Value::BF16(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            _ => false,
        };
        assert!(same, "{v:?} -> {j} -> {back:?}");
    }
}

mod interp_kernels;

#[test]
fn softmax_kernel_round_trips_through_json() {
    let k = interp_kernels::softmax(4, 1024);
    let j = serde_json::to_string(&k).unwrap();
    assert!(j.contains("\"-inf\""), "{j}");
    let back: Kernel = serde_json::from_str(&j).unwrap();
    assert_eq!(back, k);
}

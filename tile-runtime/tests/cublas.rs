//! The cuBLAS peer without a GPU: asking for it on the interpreter is an
//! error (never a panic) that says cuBLAS needs a GPU.
use tile_runtime::cublas::Gemm;
use tile_runtime::{Device, Error};

#[test]
fn interpreter_stream_is_no_driver() {
    let stream = Device::interpreter().stream().unwrap();
    let err = Gemm::new(&stream).unwrap_err();
    assert!(matches!(err, Error::NoDriver(_)), "{err:?}");
    assert!(err.to_string().contains("cuBLAS runs on a CUDA GPU"), "{err}");
}

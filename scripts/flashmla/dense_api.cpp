// Peer build only: FlashMLA's dense decode entry point (csrc/api/dense_decode.h), bound alone so
// that the sm90 dense kernels build without the sparse and sm100 sources.
#include <pybind11/pybind11.h>
#include "dense_decode.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("dense_decode_fwd", &dense_attn_decode_interface);
}

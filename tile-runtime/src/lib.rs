//! Runtime for tile kernels.

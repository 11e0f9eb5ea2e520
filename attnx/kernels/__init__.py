"""The compiled kernels (Cython over BLAS, C micro-kernels from csrc/): forward beside
backward, no Python objects, thread counts passed in."""

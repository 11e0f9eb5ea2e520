from attnx.kernels._attnargs cimport Heads

# The dense and blocked paths' head kernels (for attnx.kernels._blocks' calls of
# attnx.kernels._attnargs.layer_forward).
cdef const Heads *dense_heads() noexcept nogil

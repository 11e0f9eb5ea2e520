from attnx._attnargs cimport Heads

# The dense and blocked paths' head kernels (for attnx._blocks' calls of
# attnx._attnargs.layer_forward).
cdef const Heads *dense_heads() noexcept nogil
